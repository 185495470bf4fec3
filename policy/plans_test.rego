package cellgate.policy_test

# Plans: tenancy.plans, default_plan, plan_claim and the router's cap.

free := {"name": "free", "max_concurrent_requests": 4, "max_db_connections": 1, "rate_per_second": 5, "burst": 10, "jobs": {"max_concurrent": 1, "weight": 1}}

pro := {"name": "pro", "max_concurrent_requests": 32, "max_db_connections": 4, "rate_per_second": 50, "burst": 100, "jobs": {"max_concurrent": 2, "weight": 4}}

# planned: an authenticated source with the two plans, default free.
planned(ops) := authed(array.concat([rep("/tenancy/plans", [free, pro]), rep("/tenancy/default_plan", "free")], ops))

test_plans_allowed if {
	c := planned([])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_plans_beside_top_level_fields_denied if {
	c := planned([rep("/tenancy/max_concurrent_requests", 8), rep("/jobs/tenants/max_concurrent", 2)])
	"tenancy.plans: set beside tenancy.max_concurrent_requests, jobs.tenants.max_concurrent; with plans every per-tenant limit lives in a plan and tenancy.max_concurrent_requests, jobs.tenants.max_concurrent would not be read; move them into the plans and set tenancy.max_concurrent_requests, jobs.tenants.max_concurrent to 0" in deny_of(c)
}

test_plans_beside_one_top_level_field_denied if {
	c := planned([rep("/tenancy/rate_per_second", 3), rep("/tenancy/burst", 3)])
	has(deny_of(c), "tenancy.plans: set beside tenancy.rate_per_second, tenancy.burst;")
}

test_duplicate_plan_names_denied if {
	c := planned([rep("/tenancy/plans", [free, pro, object.union(pro, {"max_concurrent_requests": 8})])])
	"tenancy.plans[2].name: \"pro\" is also tenancy.plans[1]'s name; plan names are unique (the tenant table and tokens name plans)" in deny_of(c)
}

test_default_plan_missing_denied if {
	c := planned([rep("/tenancy/default_plan", "gold")])
	"tenancy.default_plan: \"gold\" is not one of tenancy.plans' names (free, pro); a tenant nothing else names gets the default plan; set it to one of them" in deny_of(c)
}

test_default_plan_empty_with_plans_denied if {
	c := planned([rep("/tenancy/default_plan", "")])
	has(deny_of(c), "tenancy.default_plan: \"\" is not one of tenancy.plans' names")
}

test_default_plan_without_plans_denied if {
	c := authed([rep("/tenancy/default_plan", "free")])
	has(deny_of(c), "tenancy.default_plan: \"free\" set without tenancy.plans;")
}

test_plan_claim_with_header_source_denied if {
	c := cfg([rep("/tenancy/plans", [free]), rep("/tenancy/default_plan", "free"), rep("/tenancy/jwt/plan_claim", "plan")])
	has(deny_of(c), "tenancy.jwt.plan_claim: set while tenancy.source is \"header\"; only a verified token may pick a plan")
}

test_plan_claim_with_session_source_denied if {
	c := planned([rep("/tenancy/jwt/plan_claim", "plan")])
	has(deny_of(c), "tenancy.jwt.plan_claim: set while tenancy.source is \"session\"")
}

test_plan_claim_without_plans_denied if {
	c := cfg([rep("/tenancy/source", "jwt"), rep("/tenancy/jwt/key_env", "K"), rep("/tenancy/jwt/plan_claim", "plan")])
	"tenancy.jwt.plan_claim: set without tenancy.plans; a token can only pick one of the listed plans; list the plans or drop plan_claim" in deny_of(c)
}

test_plan_claim_with_jwt_allowed if {
	c := cfg([rep("/tenancy/source", "jwt"), rep("/tenancy/jwt/key_env", "K"), rep("/tenancy/jwt/plan_claim", "plan"), rep("/tenancy/plans", [free, pro]), rep("/tenancy/default_plan", "free")])
	not has(deny_of(c), "plan_claim")
}

test_plan_caps_without_tenancy_denied if {
	c := planned([rep("/tenancy/enabled", false)])
	"tenancy.plans[1] (pro): tenancy.enabled: false, but max_concurrent_requests, max_db_connections, rate_per_second, burst are set; per-tenant caps need a tenant; enable tenancy or set them to 0" in deny_of(c)
}

test_plan_cap_at_server_cap_denied if {
	c := planned([rep("/server/max_concurrent_requests", 32)])
	"tenancy.plans[1] (pro).max_concurrent_requests: 32 per tenant is not below server.max_concurrent_requests (32); one tenant could fill the whole server; set it below 32" in deny_of(c)
	not has(deny_of(c), "tenancy.plans[0] (free).max_concurrent_requests")
}

test_plan_cap_below_server_cap_allowed if {
	c := planned([rep("/server/max_concurrent_requests", 33)])
	count(deny_of(c)) == 0
}

test_plan_rate_without_burst_denied if {
	c := planned([rep("/tenancy/plans", [object.union(free, {"burst": 0}), pro])])
	"tenancy.plans[0] (free).burst: 0 with rate_per_second 5; a token bucket that holds no token admits no request; set burst to at least 1" in deny_of(c)
}

test_plan_burst_without_rate_warned if {
	c := planned([rep("/tenancy/plans", [object.union(free, {"rate_per_second": 0}), pro])])
	"tenancy.plans[0] (free).burst: 10 has no effect while its rate_per_second is 0 (no rate limit)" in warn_of(c)
}

test_plan_weight_zero_denied if {
	c := planned([rep("/tenancy/plans", [free, object.union(pro, {"jobs": {"max_concurrent": 2, "weight": 0}})])])
	"tenancy.plans[1] (pro).jobs.weight: 0; a weight is a whole number from 1 to 1000 (claims per claim of a weight-1 tenant)" in deny_of(c)
}

test_plan_weight_above_1000_denied if {
	c := planned([rep("/tenancy/plans", [free, object.union(pro, {"jobs": {"max_concurrent": 2, "weight": 1001}})])])
	has(deny_of(c), "tenancy.plans[1] (pro).jobs.weight: 1001;")
}

test_plan_weight_1000_allowed if {
	c := planned([rep("/tenancy/plans", [free, object.union(pro, {"jobs": {"max_concurrent": 2, "weight": 1000}})])])
	count(deny_of(c)) == 0
}

test_plan_db_cap_at_shard_pool_warned if {
	c := planned([rep("/tenancy/plans", [free, object.union(pro, {"max_db_connections": 1000})])])
	has(warn_of(c), "tenancy.plans[1] (pro).max_db_connections: 1000 per tenant but the smallest shard pool has max_conns")
}

test_plan_job_cap_at_workers_warned if {
	c := planned([rep("/jobs/workers", 2)])
	"tenancy.plans[1] (pro).jobs.max_concurrent: 2 jobs per tenant with 2 workers; one tenant of this plan can still occupy every worker; set it below jobs.workers" in warn_of(c)
}

test_plans_with_header_source_warned if {
	c := cfg([rep("/tenancy/plans", [free, pro]), rep("/tenancy/default_plan", "free")])
	has(warn_of(c), "tenancy.plans: per-tenant limits with tenancy.source \"header\" count per tenant id")
}

test_plans_without_request_timeout_warned if {
	c := planned([rep("/server/request_timeout", "0s")])
	has(warn_of(c), "server.request_timeout: 0s (none) with tenancy.plans[0] (free)'s request or database caps on;")
}

test_router_cap_below_largest_plan_warned if {
	c := planned([rep("/router/max_in_flight_per_tenant", 16)])
	"router.max_in_flight_per_tenant: 16 is below tenancy.plans[1] (pro).max_concurrent_requests (32); the router refuses that plan's tenants before the cell's plan cap binds; set it to at least 32" in warn_of(c)
}

test_router_cap_at_largest_plan_quiet if {
	c := planned([rep("/router/max_in_flight_per_tenant", 32)])
	not has(warn_of(c), "router.max_in_flight_per_tenant")
}
