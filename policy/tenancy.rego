package cellgate.policy

# Tenancy: per-tenant caps, the tenant source, JWT settings and public paths.

# Caps act after the tenancy middleware finds the tenant: with tenancy off
# there is no tenant and they would silently do nothing.
deny contains msg if {
	not tenancy_enabled
	set := [k |
		some k in ["max_concurrent_requests", "max_db_connections", "rate_per_second", "burst"]
		num(input.tenancy, k) > 0
	]
	count(set) > 0
	msg := sprintf("tenancy.enabled: false, but tenancy.%s %s set; per-tenant caps need a tenant; enable tenancy or set them to 0", [concat(", tenancy.", set), is_are(set)])
}

is_are(set) := "is" if {
	count(set) == 1
} else := "are"

# A request holds a tenant permit and an admission permit, so a tenant cap at
# or above the server cap lets one tenant take the whole server.
deny contains msg if {
	t := num(input.tenancy, "max_concurrent_requests")
	s := num(input.server, "max_concurrent_requests")
	t > 0
	s > 0
	t >= s
	msg := sprintf("tenancy.max_concurrent_requests: %d per tenant is not below server.max_concurrent_requests (%d); one tenant could fill the whole server; set it below %d", [t, s, s])
}

warn contains msg if {
	tenancy_enabled
	count(tenant_caps) > 0
	src := input.tenancy.source
	src in {"header", "subdomain"}
	msg := sprintf("tenancy.source: %s lets the client choose its tenant id, so %s count per tenant id, not per client: a client can spread load over many ids, or fill another tenant's cap with slow requests; use an authenticated source (session or jwt)", [json.marshal(src), concat(", ", tenant_caps)])
}

# A permit is held until the response head is written; with no request
# timeout a stalled handler keeps it for good.
warn contains msg if {
	tenancy_enabled
	held := [k |
		some k in ["max_concurrent_requests", "max_db_connections"]
		num(input.tenancy, k) > 0
	]
	count(held) > 0
	duration_ns(input.server.request_timeout) == 0
	msg := sprintf("server.request_timeout: 0s (none) with tenancy.%s on; a stalled handler holds its tenant permit forever and the tenant slowly locks itself out; set a request timeout", [concat(", tenancy.", held)])
}

warn contains msg if {
	tenancy_enabled
	num(input.tenancy, "rate_per_second") == 0
	b := num(input.tenancy, "burst")
	b > 0
	msg := sprintf("tenancy.burst: %d has no effect while tenancy.rate_per_second is 0 (no rate limit)", [b])
}

# The server refuses this at start whether or not tenancy is on, so the
# policy denies it: generate and `server check` give the same verdict.
deny contains msg if {
	rate := num(input.tenancy, "rate_per_second")
	rate > 0
	num(input.tenancy, "burst") == 0
	msg := sprintf("tenancy.burst: 0 with tenancy.rate_per_second %v; a token bucket that holds no token admits no request; set burst to at least 1", [rate])
}

# One connection pool per shard: a tenant's data lives on one shard, so a
# tenant cap at or above that shard's pool lets one tenant drain it.
warn contains msg if {
	tenancy_enabled
	cap := num(input.tenancy, "max_db_connections")
	cap > 0
	cap >= smallest_shard_pool
	i := min([i | some i, s in shard_list; s.max_conns == smallest_shard_pool])
	msg := sprintf("tenancy.max_db_connections: %d per tenant but database.shards[%d] (%s) has max_conns %d; one tenant can hold every connection of its shard; set it below the smallest shard pool", [cap, i, shard_list[i].name, smallest_shard_pool])
}

# JWT -------------------------------------------------------------------------

jwt_source if input.tenancy.source == "jwt"

jwt_algorithms := arr(input.tenancy.jwt.algorithms)

deny contains msg if {
	jwt_source
	count(jwt_algorithms) == 0
	msg := "tenancy.jwt.algorithms: empty while tenancy.source is \"jwt\"; list the signing algorithms to accept (no token could be verified)"
}

alg_family := {
	"HS256": "HMAC", "HS384": "HMAC", "HS512": "HMAC",
	"RS256": "RSA", "RS384": "RSA", "RS512": "RSA",
	"PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
	"ES256": "ECDSA", "ES384": "ECDSA", "ES512": "ECDSA",
}

# One verification key serves one family. Accepting HMAC beside a public-key
# family is the classic key-confusion hole (a token "signed" with the public
# key as HMAC secret); the runtime refuses any mix at boot, so catch it here.
deny contains msg if {
	jwt_source
	families := {f | some a in jwt_algorithms; f := alg_family[a]}
	count(families) > 1
	msg := sprintf("tenancy.jwt.algorithms: %s mixes key families (%s); one key serves one family, and HMAC beside RSA/ECDSA invites key confusion (a public key used as HMAC secret); list one family", [json.marshal(jwt_algorithms), concat(", ", sort(families))])
}

# Exactly one setting names the keys: with two, one would silently not be
# read (the server refuses the same at boot).
jwt_key_settings := ["jwks_url", "jwks_file", "key_file", "key_env"]

jwt_keys_given := [k |
	some k in jwt_key_settings
	object.get(input.tenancy.jwt, k, "") != ""
]

deny contains msg if {
	jwt_source
	count(jwt_keys_given) == 0
	msg := "tenancy.jwt: no verification keys while tenancy.source is \"jwt\"; set exactly one of tenancy.jwt.jwks_url (the identity provider's JWKS URL), jwks_file, key_file or key_env"
}

deny contains msg if {
	jwt_source
	n := count(jwt_keys_given)
	n > 1
	msg := sprintf("tenancy.jwt.%s: set beside tenancy.jwt.%s; set exactly one of jwks_url, jwks_file, key_file and key_env (the others would not be read)", [jwt_keys_given[n - 1], concat(", tenancy.jwt.", array.slice(jwt_keys_given, 0, n - 1))])
}

jwks_url := object.get(input.tenancy.jwt, "jwks_url", "")

# A JWKS URL publishes keys to anyone: an HMAC secret there is no secret.
deny contains msg if {
	jwt_source
	jwks_url != ""
	hmac := [a | some a in jwt_algorithms; alg_family[a] == "HMAC"]
	count(hmac) > 0
	msg := sprintf("tenancy.jwt.jwks_url: set with HMAC algorithms %s; a JWKS URL publishes its keys, and an HMAC secret must never be published; list RS*, PS* or ES* algorithms", [json.marshal(hmac)])
}

# Keys fetched over plain http can be swapped by anyone on the path, who
# then signs tokens for every tenant. Loopback (a sidecar) is exempt.
warn contains msg if {
	jwt_source
	startswith(lower(jwks_url), "http://")
	not loopback_url(jwks_url)
	msg := sprintf("tenancy.jwt.jwks_url: %s is plain http; anyone between the cell and the provider can swap the keys and sign tokens for any tenant; use https", [json.marshal(jwks_url)])
}

loopback_url(u) if loopback_host(url_host(u))

url_host(u) := h if {
	m := regex.find_all_string_submatch_n(`^[A-Za-z]+://([^/?#]+)`, u, 1)
	h := regex.replace(lower(m[0][1]), `:[0-9]*$`, "")
}

loopback_host(h) if h in {"localhost", "[::1]"}

loopback_host(h) if regex.match(`^127\.[0-9]+\.[0-9]+\.[0-9]+$`, h)

# A provider signs tokens for every application (and, with keys shared by
# all its customers, for every customer): without issuer and audience any
# of those verifies here.
warn contains msg if {
	jwt_source
	jwks_url != ""
	unset := [k | some k in ["issuer", "audience"]; object.get(input.tenancy.jwt, k, "") == ""]
	count(unset) > 0
	msg := sprintf("tenancy.jwt.%s: empty with tenancy.jwt.jwks_url; every token the provider signs verifies, also those it issues to other applications or customers; set issuer and audience", [unset[0]])
}

# Each fetch an unknown kid causes is a request every process of every cell
# may send; below a second, made-up kids turn the cells into a load source
# against the provider.
warn contains msg if {
	jwt_source
	jwks_url != ""
	d := object.get(input.tenancy.jwt, "jwks_unknown_kid_interval", "10s")
	duration_ns(d) < 1000000000
	msg := sprintf("tenancy.jwt.jwks_unknown_kid_interval: %s lets tokens with made-up kids make every process fetch the key set more than once a second; use 1s or more (default 10s)", [d])
}

# key_file is documented as a PEM public key; an HMAC "secret" that is a
# public key lets anyone who has it mint tokens.
warn contains msg if {
	jwt_source
	object.get(input.tenancy.jwt, "jwks_file", "") == ""
	input.tenancy.jwt.key_file != ""
	count(jwt_algorithms) > 0
	every a in jwt_algorithms {
		alg_family[a] == "HMAC"
	}
	msg := sprintf("tenancy.jwt.key_file: %s is read as the HMAC secret of %s; if it holds a public key anyone can sign tokens; keep HMAC secrets in key_env, or list RS256/ES256", [json.marshal(input.tenancy.jwt.key_file), concat(", ", jwt_algorithms)])
}

# Routes and tenancy ------------------------------------------------------------

routes := arr(input.routes)

# With tenancy off every route runs without a tenant: nothing per-tenant
# isolates anything. Marking the routes public says "single-tenant on purpose"
# and silences this.
warn contains msg if {
	not tenancy_enabled
	tenant_routes := [route_label(i, r) | some i, r in routes; not r.public]
	count(tenant_routes) > 0
	msg := sprintf("tenancy.enabled: false, so %d non-public route(s) run without a tenant (%s); enable tenancy, or mark them public: true if the service is single-tenant", [count(tenant_routes), concat(", ", tenant_routes)])
}

# public_paths match by path only: "/x/*" is every path under /x/.
public_path_covers(p, path) if p == path

public_path_covers(p, path) if {
	endswith(p, "/*")
	startswith(path, trim_suffix(p, "*"))
}

deny contains msg if {
	tenancy_enabled
	some j, p in arr(input.tenancy.public_paths)
	some i, r in routes
	not r.public
	public_path_covers(p, r.path)
	msg := sprintf("tenancy.public_paths[%d]: %s makes tenant route %s skip tenancy, so its handler gets no tenant; mark the route public: true or narrow the path", [j, json.marshal(p), route_label(i, r)])
}

# Tenancy is skipped by path, not by method: a public GET /orders would make
# POST /orders public too.
deny contains msg if {
	tenancy_enabled
	some i, r in routes
	not r.public
	shape := route_shape(r.path)
	public := [j | some j, pr in routes; pr.public == true; route_shape(pr.path) == shape]
	count(public) > 0
	j := public[0]
	msg := sprintf("%s: tenant route shares its path with public route %s; tenancy is skipped by path, not method, so it would run without a tenant; use a different path or make both public", [route_label(i, r), route_label(j, routes[j])])
}

# Plans -------------------------------------------------------------------------

plans := arr(input.tenancy.plans)

plan_label(i, p) := sprintf("tenancy.plans[%d] (%s)", [i, p.name])

# The top-level per-tenant fields are the implicit plan of a spec without
# plans; beside plans one of them would silently not be read.
top_level_tenant_fields := [f |
	some k in ["max_concurrent_requests", "max_db_connections", "rate_per_second", "burst"]
	num(input.tenancy, k) > 0
	f := sprintf("tenancy.%s", [k])
]

top_level_job_fields := [f |
	num(input.jobs.tenants, "max_concurrent") > 0
	f := "jobs.tenants.max_concurrent"
]

deny contains msg if {
	count(plans) > 0
	both := array.concat(top_level_tenant_fields, top_level_job_fields)
	count(both) > 0
	msg := sprintf("tenancy.plans: set beside %s; with plans every per-tenant limit lives in a plan and %s would not be read; move %s into the plans and set %s to 0", [concat(", ", both), concat(", ", both), is_are_them(both), concat(", ", both)])
}

is_are_them(set) := "it" if {
	count(set) == 1
} else := "them"

deny contains msg if {
	some d in duplicates([p.name | some p in plans])
	msg := sprintf("tenancy.plans[%d].name: %s is also tenancy.plans[%d]'s name; plan names are unique (the tenant table and tokens name plans)", [d[0], json.marshal(d[2]), d[1]])
}

plan_names := {p.name | some p in plans}

deny contains msg if {
	count(plans) > 0
	d := object.get(input.tenancy, "default_plan", "")
	not d in plan_names
	msg := sprintf("tenancy.default_plan: %s is not one of tenancy.plans' names (%s); a tenant nothing else names gets the default plan; set it to one of them", [json.marshal(d), concat(", ", sort(plan_names))])
}

deny contains msg if {
	count(plans) == 0
	d := object.get(input.tenancy, "default_plan", "")
	d != ""
	msg := sprintf("tenancy.default_plan: %s set without tenancy.plans; list the plans, or drop default_plan (without plans the top-level fields are the one plan)", [json.marshal(d)])
}

deny contains msg if {
	object.get(input.tenancy.jwt, "plan_claim", "") != ""
	input.tenancy.source != "jwt"
	msg := sprintf("tenancy.jwt.plan_claim: set while tenancy.source is %s; only a verified token may pick a plan (a header, subdomain or cookie is chosen by the client), so it would not be read; use source \"jwt\" or drop plan_claim", [json.marshal(input.tenancy.source)])
}

deny contains msg if {
	object.get(input.tenancy.jwt, "plan_claim", "") != ""
	count(plans) == 0
	msg := "tenancy.jwt.plan_claim: set without tenancy.plans; a token can only pick one of the listed plans; list the plans or drop plan_claim"
}

plan_caps(p) := [k |
	some k in ["max_concurrent_requests", "max_db_connections", "rate_per_second", "burst"]
	num(p, k) > 0
]

deny contains msg if {
	not tenancy_enabled
	some i, p in plans
	set := plan_caps(p)
	count(set) > 0
	msg := sprintf("%s: tenancy.enabled: false, but %s %s set; per-tenant caps need a tenant; enable tenancy or set them to 0", [plan_label(i, p), concat(", ", set), is_are(set)])
}

deny contains msg if {
	s := num(input.server, "max_concurrent_requests")
	s > 0
	some i, p in plans
	t := num(p, "max_concurrent_requests")
	t >= s
	msg := sprintf("%s.max_concurrent_requests: %d per tenant is not below server.max_concurrent_requests (%d); one tenant could fill the whole server; set it below %d", [plan_label(i, p), t, s, s])
}

deny contains msg if {
	some i, p in plans
	rate := num(p, "rate_per_second")
	rate > 0
	num(p, "burst") == 0
	msg := sprintf("%s.burst: 0 with rate_per_second %v; a token bucket that holds no token admits no request; set burst to at least 1", [plan_label(i, p), rate])
}

deny contains msg if {
	some i, p in plans
	w := object.get(object.get(p, "jobs", {}), "weight", 1)
	not valid_weight(w)
	msg := sprintf("%s.jobs.weight: %v; a weight is a whole number from 1 to 1000 (claims per claim of a weight-1 tenant)", [plan_label(i, p), w])
}

valid_weight(w) if {
	is_number(w)
	w == floor(w)
	w >= 1
	w <= 1000
}

warn contains msg if {
	tenancy_enabled
	some i, p in plans
	num(p, "rate_per_second") == 0
	b := num(p, "burst")
	b > 0
	msg := sprintf("%s.burst: %d has no effect while its rate_per_second is 0 (no rate limit)", [plan_label(i, p), b])
}

warn contains msg if {
	tenancy_enabled
	some i, p in plans
	cap := num(p, "max_db_connections")
	cap > 0
	cap >= smallest_shard_pool
	msg := sprintf("%s.max_db_connections: %d per tenant but the smallest shard pool has max_conns %d; one tenant can hold every connection of its shard; set it below the smallest shard pool", [plan_label(i, p), cap, smallest_shard_pool])
}

warn contains msg if {
	some i, p in plans
	mc := num(object.get(p, "jobs", {}), "max_concurrent")
	workers := num(input.jobs, "workers")
	workers > 0
	mc >= workers
	msg := sprintf("%s.jobs.max_concurrent: %d jobs per tenant with %d workers; one tenant of this plan can still occupy every worker; set it below jobs.workers", [plan_label(i, p), mc, workers])
}

warn contains msg if {
	tenancy_enabled
	count(plans) > 0
	input.tenancy.source in {"header", "subdomain"}
	some p in plans
	count(plan_caps(p)) > 0
	msg := sprintf("tenancy.plans: per-tenant limits with tenancy.source %s count per tenant id, not per client: a client can spread load over many ids; use an authenticated source (session or jwt)", [json.marshal(input.tenancy.source)])
}

warn contains msg if {
	tenancy_enabled
	duration_ns(input.server.request_timeout) == 0
	some i, p in plans
	num(p, "max_concurrent_requests") + num(p, "max_db_connections") > 0
	msg := sprintf("server.request_timeout: 0s (none) with %s's request or database caps on; a stalled handler holds its tenant permit forever; set a request timeout", [plan_label(i, p)])
}
