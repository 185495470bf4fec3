package cellgate.policy

# The cell router's caps.

# The per-tenant cap sits in front of the per-cell cap so that one tenant
# cannot take its cell's whole share of the router (stalled uploads, slow
# answers). A per-tenant cap above the per-cell cap would never bind before
# the cell's, and one tenant could fill it. 0 means no cap.
deny contains msg if {
	t := num(input.router, "max_in_flight_per_tenant")
	c := num(input.router, "max_in_flight_per_cell")
	t > 0
	c > 0
	t > c
	msg := sprintf("router.max_in_flight_per_tenant: %d per tenant is above router.max_in_flight_per_cell (%d); one tenant could take a cell's whole share of the router; set it to at most %d", [t, c, c])
}

# Without a per-tenant cap, but with a per-cell cap, one tenant's slow
# requests can fill the cell's cap and refuse every other tenant of the cell.
warn contains msg if {
	num(input.router, "max_in_flight_per_tenant") == 0
	c := num(input.router, "max_in_flight_per_cell")
	c > 0
	msg := sprintf("router.max_in_flight_per_tenant: 0 (no cap) lets one tenant fill router.max_in_flight_per_cell (%d) and refuse every other tenant of its cell; set a per-tenant cap below it", [c])
}

# The router has no database, so its per-tenant cap is one number for all
# plans: below a plan's request cap it refuses that plan's tenants first.
warn contains msg if {
	t := num(input.router, "max_in_flight_per_tenant")
	t > 0
	caps := [c | some p in arr(input.tenancy.plans); c := num(p, "max_concurrent_requests")]
	count(caps) > 0
	largest := max(caps)
	t < largest
	i := min([i | some i, p in arr(input.tenancy.plans); num(p, "max_concurrent_requests") == largest])
	msg := sprintf("router.max_in_flight_per_tenant: %d is below tenancy.plans[%d] (%s).max_concurrent_requests (%d); the router refuses that plan's tenants before the cell's plan cap binds; set it to at least %d", [t, i, input.tenancy.plans[i].name, largest, largest])
}
