package cellgate.policy_test

test_router_tenant_cap_above_cell_cap_denied if {
	c := cfg([rep("/router/max_in_flight_per_tenant", 2048)])
	"router.max_in_flight_per_tenant: 2048 per tenant is above router.max_in_flight_per_cell (1024); one tenant could take a cell's whole share of the router; set it to at most 1024" in deny_of(c)
}

test_router_tenant_cap_equal_to_cell_cap_allowed if {
	c := cfg([rep("/router/max_in_flight_per_tenant", 1024)])
	count(deny_of(c)) == 0
}

test_router_defaults_quiet if {
	c := cfg([])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_router_no_cell_cap_allows_any_tenant_cap if {
	c := cfg([rep("/router/max_in_flight_per_cell", 0), rep("/router/max_in_flight_per_tenant", 5000)])
	count(deny_of(c)) == 0
}

test_router_no_tenant_cap_warned if {
	c := cfg([rep("/router/max_in_flight_per_tenant", 0)])
	"router.max_in_flight_per_tenant: 0 (no cap) lets one tenant fill router.max_in_flight_per_cell (1024) and refuse every other tenant of its cell; set a per-tenant cap below it" in warn_of(c)
	count(deny_of(c)) == 0
}
