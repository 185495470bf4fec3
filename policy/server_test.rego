package cellgate.policy_test

test_route_on_probe_path_denied if {
	c := cfg([add("/routes/-", {"method": "GET", "path": "/healthz", "handler": "Health", "public": true})])
	"routes[5] (GET /healthz): /healthz is served by cellgate itself (probes /healthz, /readyz, /metrics; /admin/*); choose another path" in deny_of(c)
}

test_route_under_admin_denied if {
	c := cfg([add("/routes/-", {"method": "POST", "path": "/admin/reset", "handler": "Reset", "public": false})])
	has(deny_of(c), "routes[5] (POST /admin/reset): /admin/reset is served by cellgate itself")
}

test_route_near_reserved_paths_allowed if {
	c := cfg([
		add("/routes/-", {"method": "GET", "path": "/healthzz", "handler": "A", "public": false}),
		add("/routes/-", {"method": "GET", "path": "/administrators", "handler": "B", "public": false}),
	])
	count(deny_of(c)) == 0
}

test_overage_with_unlimited_funding_warned if {
	c := cfg([rep("/admission/overage_allowance", 16)])
	"admission.overage_allowance: 16 has no effect while admission.funding is 0 (unlimited)" in warn_of(c)
}

test_overage_with_funding_quiet if {
	c := cfg([rep("/admission/overage_allowance", 16), rep("/admission/funding", 1000)])
	count(warn_of(c)) == 0
}

test_leases_beyond_funding_warned if {
	c := cfg([rep("/admission/shards", 8), rep("/admission/lease_size", 64), rep("/admission/funding", 256)])
	"admission.lease_size: 64 units × 8 shards is more than admission.funding (256); some shards would find the line empty while units sit in other shards' leases; lower lease_size to at most funding / shards (32)" in warn_of(c)
}

test_leases_within_funding_quiet if {
	c := cfg([rep("/admission/shards", 8), rep("/admission/lease_size", 32), rep("/admission/funding", 256)])
	count(warn_of(c)) == 0
}

test_single_shard_lease_beyond_funding_quiet if {
	c := cfg([rep("/admission/lease_size", 64), rep("/admission/funding", 10)])
	count(warn_of(c)) == 0
}

test_server_cell_not_a_cell_denied if {
	c := cfg([add("/server/cell", "cell-9")])
	"server.cell: \"cell-9\" is not one of cells[].name (cell-1); name the cell this process serves, or leave it empty for a single cell" in deny_of(c)
}

test_server_cell_naming_a_cell_allowed if {
	c := cfg([add("/server/cell", "cell-1")])
	count(deny_of(c)) == 0
}

test_server_cell_empty_allowed if {
	c := cfg([add("/server/cell", "")])
	count(deny_of(c)) == 0
}

test_body_timeout_beyond_read_timeout_warned if {
	c := cfg([rep("/server/body_read_timeout", "30s")])
	"server.body_read_timeout: 30s is not below server.read_timeout (30s), which bounds the whole request; it has no effect; set it below read_timeout" in warn_of(c)
}

test_body_timeout_below_read_timeout_quiet if {
	c := cfg([rep("/server/body_read_timeout", "10s")])
	count(warn_of(c)) == 0
}
