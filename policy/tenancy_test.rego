package cellgate.policy_test

# authed: tenancy on with an authenticated source, so cap tests see no
# client-chosen-tenant warning.
authed(ops) := cfg(array.concat([rep("/tenancy/source", "session")], ops))

# caps need tenancy

test_caps_without_tenancy_denied if {
	c := cfg([rep("/tenancy/enabled", false), rep("/tenancy/max_concurrent_requests", 8), rep("/tenancy/rate_per_second", 5), rep("/tenancy/burst", 10)])
	"tenancy.enabled: false, but tenancy.max_concurrent_requests, tenancy.rate_per_second, tenancy.burst are set; per-tenant caps need a tenant; enable tenancy or set them to 0" in deny_of(c)
}

test_one_cap_without_tenancy_denied if {
	c := cfg([rep("/tenancy/enabled", false), rep("/tenancy/max_db_connections", 2)])
	"tenancy.enabled: false, but tenancy.max_db_connections is set; per-tenant caps need a tenant; enable tenancy or set them to 0" in deny_of(c)
}

test_caps_with_tenancy_allowed if {
	c := authed([rep("/tenancy/max_concurrent_requests", 8), rep("/tenancy/max_db_connections", 2)])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_no_caps_without_tenancy_allowed if {
	c := cfg([rep("/tenancy/enabled", false)])
	count(deny_of(c)) == 0
}

# tenant cap below server cap

test_tenant_cap_at_server_cap_denied if {
	c := authed([rep("/tenancy/max_concurrent_requests", 100), rep("/server/max_concurrent_requests", 100)])
	"tenancy.max_concurrent_requests: 100 per tenant is not below server.max_concurrent_requests (100); one tenant could fill the whole server; set it below 100" in deny_of(c)
}

test_tenant_cap_below_server_cap_allowed if {
	c := authed([rep("/tenancy/max_concurrent_requests", 99), rep("/server/max_concurrent_requests", 100)])
	count(deny_of(c)) == 0
}

test_tenant_cap_without_server_cap_allowed if {
	c := authed([rep("/tenancy/max_concurrent_requests", 1000), rep("/server/max_concurrent_requests", 0)])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_server_cap_without_tenant_cap_allowed if {
	c := authed([rep("/server/max_concurrent_requests", 10)])
	count(deny_of(c)) == 0
}

# caps with a client-chosen tenant

test_caps_with_header_source_warned if {
	c := cfg([rep("/tenancy/max_concurrent_requests", 8), rep("/tenancy/rate_per_second", 5), rep("/tenancy/burst", 5)])
	"tenancy.source: \"header\" lets the client choose its tenant id, so max_concurrent_requests, rate_per_second count per tenant id, not per client: a client can spread load over many ids, or fill another tenant's cap with slow requests; use an authenticated source (session or jwt)" in warn_of(c)
}

test_caps_with_subdomain_source_warned if {
	c := cfg([rep("/tenancy/source", "subdomain"), rep("/tenancy/max_db_connections", 2)])
	has(warn_of(c), "tenancy.source: \"subdomain\" lets the client choose its tenant id, so max_db_connections count")
}

test_caps_with_jwt_source_quiet if {
	c := cfg([rep("/tenancy/source", "jwt"), rep("/tenancy/max_db_connections", 2)])
	not has(warn_of(c), "tenancy.source")
}

test_header_source_without_caps_quiet if {
	not has(warn_of(base), "tenancy.source")
}

# request timeout with caps

test_caps_without_request_timeout_warned if {
	c := authed([rep("/tenancy/max_concurrent_requests", 8), rep("/server/request_timeout", "0s")])
	has(warn_of(c), "server.request_timeout: 0s (none) with tenancy.max_concurrent_requests on;")
}

test_caps_without_request_timeout_as_nanoseconds_warned if {
	c := authed([rep("/tenancy/max_db_connections", 2), rep("/server/request_timeout", 0)])
	has(warn_of(c), "server.request_timeout: 0s (none) with tenancy.max_db_connections on;")
}

test_caps_with_request_timeout_as_nanoseconds_quiet if {
	c := authed([rep("/tenancy/max_db_connections", 2), rep("/server/request_timeout", 30000000000)])
	count(warn_of(c)) == 0
}

test_caps_with_request_timeout_quiet if {
	c := authed([rep("/tenancy/max_concurrent_requests", 8), rep("/server/request_timeout", "1m")])
	not has(warn_of(c), "server.request_timeout")
}

test_no_caps_without_request_timeout_quiet if {
	c := cfg([rep("/server/request_timeout", "0ms")])
	not has(warn_of(c), "server.request_timeout")
}

# rate and burst

test_burst_without_rate_warned if {
	c := authed([rep("/tenancy/burst", 10)])
	"tenancy.burst: 10 has no effect while tenancy.rate_per_second is 0 (no rate limit)" in warn_of(c)
}

test_rate_without_burst_denied if {
	c := authed([rep("/tenancy/rate_per_second", 2.5)])
	"tenancy.burst: 0 with tenancy.rate_per_second 2.5; a token bucket that holds no token admits no request; set burst to at least 1" in deny_of(c)
}

test_rate_without_burst_denied_with_tenancy_off if {
	c := cfg([rep("/tenancy/enabled", false), rep("/tenancy/rate_per_second", 1), rep("/routes", [])])
	"tenancy.burst: 0 with tenancy.rate_per_second 1; a token bucket that holds no token admits no request; set burst to at least 1" in deny_of(c)
}

test_rate_with_burst_quiet if {
	c := authed([rep("/tenancy/rate_per_second", 2.5), rep("/tenancy/burst", 5)])
	count(warn_of(c)) == 0
}

# per-tenant db cap vs shard pools

test_db_cap_at_smallest_pool_warned if {
	c := authed([rep("/tenancy/max_db_connections", 6), rep("/database/shards/1/max_conns", 6), rep("/database/shards/0/max_conns", 20)])
	"tenancy.max_db_connections: 6 per tenant but database.shards[1] (shard-1) has max_conns 6; one tenant can hold every connection of its shard; set it below the smallest shard pool" in warn_of(c)
}

test_db_cap_below_pools_quiet if {
	c := authed([rep("/tenancy/max_db_connections", 9)])
	count(warn_of(c)) == 0
}

# JWT

# jwt: the jwt source with its key in CELLGATE_JWT_KEY; ops may replace it.
jwt(ops) := cfg(array.concat([rep("/tenancy/source", "jwt"), rep("/tenancy/jwt/key_env", "CELLGATE_JWT_KEY")], ops))

test_jwt_without_algorithms_denied if {
	c := jwt([rep("/tenancy/jwt/algorithms", [])])
	"tenancy.jwt.algorithms: empty while tenancy.source is \"jwt\"; list the signing algorithms to accept (no token could be verified)" in deny_of(c)
}

test_jwt_with_algorithms_allowed if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["RS256"])])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_empty_algorithms_unused_by_header_source_allowed if {
	c := cfg([rep("/tenancy/jwt/algorithms", [])])
	count(deny_of(c)) == 0
}

test_jwt_mixed_hmac_and_rsa_denied if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["HS256", "RS256"])])
	has(deny_of(c), "tenancy.jwt.algorithms: [\"HS256\",\"RS256\"] mixes key families (HMAC, RSA);")
}

test_jwt_mixed_rsa_and_ecdsa_denied if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["ES256", "RS256"])])
	has(deny_of(c), "tenancy.jwt.algorithms: [\"ES256\",\"RS256\"] mixes key families (ECDSA, RSA);")
}

test_jwt_rsa_and_pss_one_family_allowed if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["RS256", "PS384", "RS512"])])
	not has(deny_of(c), "tenancy.jwt")
}

test_jwt_mixed_es384_and_hs512_denied if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["ES384", "HS512"])])
	has(deny_of(c), "tenancy.jwt.algorithms: [\"ES384\",\"HS512\"] mixes key families (ECDSA, HMAC);")
}

test_jwt_one_family_allowed if {
	c := jwt([rep("/tenancy/jwt/algorithms", ["ES256"])])
	not has(deny_of(c), "tenancy.jwt")
}

test_jwt_hmac_key_file_warned if {
	c := jwt([rep("/tenancy/jwt/key_env", ""), rep("/tenancy/jwt/key_file", "/etc/cellgate/jwt.pem")])
	has(warn_of(c), "tenancy.jwt.key_file: \"/etc/cellgate/jwt.pem\" is read as the HMAC secret of HS256;")
}

test_jwt_jwks_file_quiet if {
	c := jwt([rep("/tenancy/jwt/key_env", ""), rep("/tenancy/jwt/jwks_file", "/etc/cellgate/jwks.json")])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_jwt_rsa_key_file_quiet if {
	c := jwt([rep("/tenancy/jwt/key_env", ""), rep("/tenancy/jwt/key_file", "/etc/cellgate/jwt.pem"), rep("/tenancy/jwt/algorithms", ["RS256"])])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

# exactly one of jwks_url, jwks_file, key_file, key_env

test_jwt_without_keys_denied if {
	c := jwt([rep("/tenancy/jwt/key_env", "")])
	"tenancy.jwt: no verification keys while tenancy.source is \"jwt\"; set exactly one of tenancy.jwt.jwks_url (the identity provider's JWKS URL), jwks_file, key_file or key_env" in deny_of(c)
}

test_jwt_key_file_beside_jwks_file_denied if {
	c := jwt([rep("/tenancy/jwt/key_env", ""), rep("/tenancy/jwt/key_file", "/etc/cellgate/jwt.pem"), rep("/tenancy/jwt/jwks_file", "/etc/cellgate/jwks.json")])
	"tenancy.jwt.key_file: set beside tenancy.jwt.jwks_file; set exactly one of jwks_url, jwks_file, key_file and key_env (the others would not be read)" in deny_of(c)
}

test_jwt_three_key_settings_denied if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/key_file", "/k.pem"), rep("/tenancy/jwt/key_env", "CELLGATE_JWT_KEY")])
	"tenancy.jwt.key_env: set beside tenancy.jwt.jwks_url, tenancy.jwt.key_file; set exactly one of jwks_url, jwks_file, key_file and key_env (the others would not be read)" in deny_of(c)
}

test_jwt_keys_unused_by_header_source_allowed if {
	c := cfg([rep("/tenancy/jwt/key_env", ""), rep("/tenancy/jwt/jwks_url", "https://id.example.com/jwks"), rep("/tenancy/jwt/key_file", "/k.pem")])
	not has(deny_of(c), "tenancy.jwt")
}

# jwks_url

# rsa_url: jwt source, RS256, keys from url, issuer and audience set.
rsa_url(url, ops) := jwt(array.concat(
	[
		rep("/tenancy/jwt/key_env", ""),
		rep("/tenancy/jwt/algorithms", ["RS256"]),
		rep("/tenancy/jwt/jwks_url", url),
		rep("/tenancy/jwt/issuer", "https://id.example.com/"),
		rep("/tenancy/jwt/audience", "https://api.example.com"),
	],
	ops,
))

test_jwt_jwks_url_quiet if {
	c := rsa_url("https://id.example.com/.well-known/jwks.json", [])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_jwt_jwks_url_with_key_env_denied if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/key_env", "CELLGATE_JWT_KEY")])
	"tenancy.jwt.key_env: set beside tenancy.jwt.jwks_url; set exactly one of jwks_url, jwks_file, key_file and key_env (the others would not be read)" in deny_of(c)
}

test_jwt_jwks_url_with_hmac_denied if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/algorithms", ["HS256", "HS512"])])
	has(deny_of(c), "tenancy.jwt.jwks_url: set with HMAC algorithms [\"HS256\",\"HS512\"]; a JWKS URL publishes its keys")
}

test_jwt_jwks_url_plain_http_warned if {
	c := rsa_url("http://id.example.com/jwks", [])
	"tenancy.jwt.jwks_url: \"http://id.example.com/jwks\" is plain http; anyone between the cell and the provider can swap the keys and sign tokens for any tenant; use https" in warn_of(c)
}

test_jwt_jwks_url_plain_http_loopback_quiet if {
	every u in ["http://127.0.0.1:8081/jwks", "http://localhost/jwks", "http://LOCALHOST:9000/k", "http://[::1]:8081/jwks", "http://127.9.8.7/jwks"] {
		count(warn_of(rsa_url(u, []))) == 0
	}
}

test_jwt_jwks_url_lookalike_hosts_warned if {
	every u in ["http://localhost.evil.example/jwks", "http://127.0.0.1.nip.io/jwks", "http://[::1].example/jwks"] {
		has(warn_of(rsa_url(u, [])), "tenancy.jwt.jwks_url: ")
	}
}

test_jwt_jwks_url_without_issuer_warned if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/issuer", "")])
	"tenancy.jwt.issuer: empty with tenancy.jwt.jwks_url; every token the provider signs verifies, also those it issues to other applications or customers; set issuer and audience" in warn_of(c)
}

test_jwt_jwks_url_without_audience_warned if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/audience", "")])
	has(warn_of(c), "tenancy.jwt.audience: empty with tenancy.jwt.jwks_url;")
}

test_jwt_jwks_url_fast_unknown_kid_interval_warned if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/jwks_unknown_kid_interval", "200ms")])
	"tenancy.jwt.jwks_unknown_kid_interval: 200ms lets tokens with made-up kids make every process fetch the key set more than once a second; use 1s or more (default 10s)" in warn_of(c)
}

test_jwt_jwks_url_one_second_unknown_kid_interval_quiet if {
	c := rsa_url("https://id.example.com/jwks", [rep("/tenancy/jwt/jwks_unknown_kid_interval", "1s")])
	count(warn_of(c)) == 0
}

# tenancy off with tenant routes

test_tenancy_off_with_tenant_routes_warned if {
	c := cfg([rep("/tenancy/enabled", false)])
	"tenancy.enabled: false, so 4 non-public route(s) run without a tenant (routes[1] (POST /signup), routes[2] (GET /account), routes[3] (POST /orders), routes[4] (GET /orders)); enable tenancy, or mark them public: true if the service is single-tenant" in warn_of(c)
}

test_tenancy_off_with_public_routes_quiet if {
	c := cfg([
		rep("/tenancy/enabled", false),
		rep("/routes/1/public", true), rep("/routes/2/public", true),
		rep("/routes/3/public", true), rep("/routes/4/public", true),
	])
	count(warn_of(c)) == 0
}

test_tenancy_on_with_tenant_routes_quiet if {
	not has(warn_of(base), "tenancy.enabled")
}

# public paths that swallow tenant routes

test_public_prefix_over_tenant_route_denied if {
	c := cfg([rep("/tenancy/public_paths", ["/docs", "/orders/*"]), add("/routes/-", {"method": "GET", "path": "/orders/:id", "handler": "GetOrder", "public": false})])
	"tenancy.public_paths[1]: \"/orders/*\" makes tenant route routes[5] (GET /orders/:id) skip tenancy, so its handler gets no tenant; mark the route public: true or narrow the path" in deny_of(c)
}

test_public_exact_over_tenant_route_denied if {
	c := cfg([rep("/tenancy/public_paths", ["/account"])])
	has(deny_of(c), "tenancy.public_paths[0]: \"/account\" makes tenant route routes[2] (GET /account) skip tenancy")
}

test_public_paths_beside_tenant_routes_allowed if {
	# "/orders/*" matches paths under /orders/, not /orders itself.
	c := cfg([rep("/tenancy/public_paths", ["/docs", "/static/*", "/orders/*"])])
	count(deny_of(c)) == 0
}

# public and tenant routes on one path

test_public_and_tenant_route_same_path_denied if {
	c := cfg([rep("/routes/4/public", true)])
	"routes[3] (POST /orders): tenant route shares its path with public route routes[4] (GET /orders); tenancy is skipped by path, not method, so it would run without a tenant; use a different path or make both public" in deny_of(c)
}

test_public_and_tenant_route_same_param_path_denied if {
	c := cfg([
		add("/routes/-", {"method": "GET", "path": "/items/{id}", "handler": "GetItem", "public": true}),
		add("/routes/-", {"method": "DELETE", "path": "/items/{item}", "handler": "DeleteItem", "public": false}),
	])
	has(deny_of(c), "routes[6] (DELETE /items/{item}): tenant route shares its path with public route routes[5] (GET /items/{id})")
}

test_public_and_tenant_routes_distinct_paths_allowed if {
	not has(deny_of(base), "routes")
}
