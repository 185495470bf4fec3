package cellgate.policy_test

test_path_parameter_allowed if {
	c := cfg([add("/routes/-", route("GET", "/orders/{id}", "GetOrder"))])
	count(deny_of(c)) == 0
}

test_echo_syntax_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders/:id", "GetOrder"))])
	"routes[5].path: segment \":id\" uses Echo's syntax; write a path parameter as {name} (/orders/{id})" in deny_of(c)
}

test_wildcard_denied if {
	c := cfg([add("/routes/-", route("GET", "/files/*", "Files"))])
	has(deny_of(c), "routes[5].path: segment \"*\" uses Echo's syntax")
}

test_bad_parameter_name_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders/{Id}", "GetOrder"))])
	has(deny_of(c), "routes[5].path: segment \"{Id}\" is not a path parameter")
}

test_partial_segment_parameter_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders/x{id}", "GetOrder"))])
	has(deny_of(c), "routes[5].path: segment \"x{id}\" is not a path parameter")
}

test_unopened_brace_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders/id}", "GetOrder"))])
	has(deny_of(c), "routes[5].path: segment \"id}\" has a } without {")
}

test_duplicate_parameter_denied if {
	c := cfg([add("/routes/-", route("GET", "/a/{id}/b/{id}", "GetAB"))])
	"routes[5].path: parameter {id} appears twice; each parameter of one path needs its own name" in deny_of(c)
}

test_empty_segment_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders//x", "X"))])
	has(deny_of(c), "routes[5].path: \"/orders//x\" has an empty segment")
}

test_static_beside_parameter_allowed if {
	c := cfg([
		add("/routes/-", route("GET", "/orders/{id}", "GetOrder")),
		add("/routes/-", route("GET", "/orders/latest", "LatestOrder")),
	])
	count(deny_of(c)) == 0
}

test_idempotent_tenant_post_allowed if {
	count(deny_of(base)) == 0
}

test_idempotent_get_denied if {
	c := cfg([add("/routes/-", object.union(route("GET", "/things", "ListThings"), {"idempotent": true}))])
	"routes[5].idempotent: GET /things is not POST, PUT, PATCH or DELETE; only a route that changes something takes an Idempotency-Key" in deny_of(c)
}

test_idempotent_public_denied if {
	c := cfg([add("/routes/-", object.union(route("POST", "/hooks", "Hook"), {"public": true, "idempotent": true}))])
	"routes[5].idempotent: POST /hooks is public; idempotency keys are kept per tenant, so only a tenant route can be idempotent" in deny_of(c)
}

test_idempotency_lease_within_request_timeout_denied if {
	c := cfg([rep("/server/idempotency/lease", "30s")])
	"server.idempotency.lease: 30s is not longer than server.request_timeout (30s); a retry could take over a key whose first request still runs" in deny_of(c)
}

test_idempotency_lease_unchecked_without_idempotent_routes if {
	c := cfg([
		rep("/server/idempotency/lease", "1s"),
		rep("/routes/1/idempotent", false),
		rep("/routes/3/idempotent", false),
	])
	count(deny_of(c)) == 0
}

test_idempotency_ttl_below_lease_denied if {
	c := cfg([rep("/server/idempotency/ttl", "30s")])
	has(deny_of(c), "server.idempotency.ttl: 30s is shorter than server.idempotency.lease (60s)")
}
