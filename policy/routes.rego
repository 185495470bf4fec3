package cellgate.policy

# Route paths. A path parameter is a whole segment written {name}
# (/orders/{id}); the generator registers it with Echo as :name and the
# handler reads it with c.Param("name"). Two routes of one method whose
# paths differ only in parameter names are one route to Echo (the names.rego
# duplicate rule, through route_key).

param_name_pattern := `^[a-z][a-z0-9_]*$`

# segments are a path's segments after the leading "/".
segments(path) := array.slice(split(path, "/"), 1, count(split(path, "/")))

# Echo's own syntax (:id, *) would bypass the validation below.
deny contains msg if {
	some i, r in arr(input.routes)
	some seg in segments(r.path)
	regex.match(`^:|\*`, seg)
	msg := sprintf("%s.path: segment %s uses Echo's syntax; write a path parameter as {name} (/orders/{id})", [route_path(i), json.marshal(seg)])
}

deny contains msg if {
	some i, r in arr(input.routes)
	some seg in segments(r.path)
	contains(seg, "{")
	not regex.match(`^\{[a-z][a-z0-9_]*\}$`, seg)
	msg := sprintf("%s.path: segment %s is not a path parameter; a parameter is a whole segment {name}, name matching %s", [route_path(i), json.marshal(seg), param_name_pattern])
}

deny contains msg if {
	some i, r in arr(input.routes)
	some seg in segments(r.path)
	not contains(seg, "{")
	contains(seg, "}")
	msg := sprintf("%s.path: segment %s has a } without {; a parameter is a whole segment {name}", [route_path(i), json.marshal(seg)])
}

deny contains msg if {
	some i, r in arr(input.routes)
	names := [n | some seg in segments(r.path); regex.match(`^\{[a-z][a-z0-9_]*\}$`, seg); n := trim(seg, "{}")]
	some d in duplicates(names)
	msg := sprintf("%s.path: parameter {%s} appears twice; each parameter of one path needs its own name", [route_path(i), d[2]])
}

# An empty segment (//, or a trailing / after the root) never matches
# what Echo serves for the same path without it.
deny contains msg if {
	some i, r in arr(input.routes)
	r.path != "/"
	some seg in segments(r.path)
	seg == ""
	msg := sprintf("%s.path: %s has an empty segment (// or a trailing /); remove it", [route_path(i), json.marshal(r.path)])
}

route_path(i) := sprintf("routes[%d]", [i])

# An Idempotency-Key is kept per tenant on the tenant's shard, and only a
# request that changes something needs one: GET is safe to retry as is.
deny contains msg if {
	some i, r in arr(input.routes)
	r.idempotent == true
	r.public == true
	msg := sprintf("%s.idempotent: %s %s is public; idempotency keys are kept per tenant, so only a tenant route can be idempotent", [route_path(i), r.method, r.path])
}

deny contains msg if {
	some i, r in arr(input.routes)
	r.idempotent == true
	not r.method in {"POST", "PUT", "PATCH", "DELETE"}
	msg := sprintf("%s.idempotent: %s %s is not POST, PUT, PATCH or DELETE; only a route that changes something takes an Idempotency-Key", [route_path(i), r.method, r.path])
}

# A lease shorter than the request deadline lets a retry take over a key
# whose first request is still running, and run the handler twice.
deny contains msg if {
	some r in arr(input.routes)
	r.idempotent == true
	lease := duration_ns(input.server.idempotency.lease)
	rt := duration_ns(input.server.request_timeout)
	rt > 0
	lease <= rt
	msg := sprintf("server.idempotency.lease: %s is not longer than server.request_timeout (%s); a retry could take over a key whose first request still runs", [input.server.idempotency.lease, input.server.request_timeout])
}

deny contains msg if {
	some r in arr(input.routes)
	r.idempotent == true
	duration_ns(input.server.idempotency.ttl) < duration_ns(input.server.idempotency.lease)
	msg := sprintf("server.idempotency.ttl: %s is shorter than server.idempotency.lease (%s); a key would expire while in progress", [input.server.idempotency.ttl, input.server.idempotency.lease])
}
