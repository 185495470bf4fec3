package cellgate.policy_test

test_pdb_blocking_every_eviction_denied if {
	c := cfg([rep("/deploy/cells/min_available", 2)])
	"deploy.cells.min_available: 2 with 2 replicas leaves no pod evictable, so a node drain would block; set min_available <= 1" in deny_of(c)
}

test_router_pdb_blocking_every_eviction_denied if {
	c := cfg([rep("/deploy/router/replicas", 3), rep("/deploy/router/min_available", 3)])
	"deploy.router.min_available: 3 with 3 replicas leaves no pod evictable, so a node drain would block; set min_available <= 2" in deny_of(c)
}

test_pdb_leaving_one_pod_evictable_allowed if {
	c := cfg([rep("/deploy/cells/replicas", 3), rep("/deploy/cells/min_available", 2)])
	count(deny_of(c)) == 0
}

two_split_cells := [
	rep("/cells/0/slots", ["0-8191"]),
	add("/cells/-", {"name": "cell-2", "url": "http://127.0.0.1:8082", "slots": ["8192-16383"]}),
	rep("/database/shards/0/slots", ["0-8191"]),
	rep("/database/shards/1/slots", ["8192-16383"]),
]

test_single_router_with_two_split_cells_denied if {
	c := cfg(array.concat(two_split_cells, [rep("/deploy/router/replicas", 1), rep("/deploy/router/min_available", 0)]))
	"deploy.router.replicas: 1 with 2 cells; the router fronts every cell, so run at least 2" in deny_of(c)
}

test_two_routers_with_two_split_cells_allowed if {
	count(deny_of(cfg(two_split_cells))) == 0
}

test_single_router_with_one_cell_allowed if {
	c := cfg([rep("/deploy/router/replicas", 1), rep("/deploy/router/min_available", 0)])
	count(deny_of(c)) == 0
}

test_grace_period_not_above_drain_denied if {
	c := cfg([rep("/deploy/termination_grace_period", "30s")])
	"deploy.termination_grace_period: 30s is not above deploy.pre_stop_sleep (5s) + server.shutdown_timeout (15s) + jobs.shutdown_timeout (10s); Kubernetes would kill pods mid-drain; raise it above 30s" in deny_of(c)
}

test_grace_period_above_drain_allowed if {
	c := cfg([rep("/deploy/termination_grace_period", "31s")])
	count(deny_of(c)) == 0
}

test_grace_period_follows_shutdown_timeout if {
	c := cfg([rep("/server/shutdown_timeout", "40s")])
	has(deny_of(c), "deploy.termination_grace_period: 45s is not above")
}

test_fractional_seconds_denied if {
	c := cfg([rep("/deploy/pre_stop_sleep", "1500ms")])
	"deploy.pre_stop_sleep: 1500ms is not a whole number of seconds; Kubernetes counts it in seconds" in deny_of(c)
}

test_cell_name_not_a_kubernetes_name_denied if {
	c := cfg([rep("/cells/0/name", "cell_1")])
	has(deny_of(c), "cells[0].name: \"cell_1\" is not a Kubernetes name")
}

test_cell_name_too_long_denied if {
	c := cfg([rep("/cells/0/name", "c23456789012345678901234567890123456789012345678901234567")])
	has(deny_of(c), "cells[0].name: \"c23456789012345678901234567890123456789012345678901234567\" is not a Kubernetes name")
}

test_cell_named_router_denied if {
	c := cfg([rep("/cells/0/name", "router")])
	"cells[0].name: \"router\" is the router's name in the generated manifests; rename the cell" in deny_of(c)
}

test_single_cell_replica_warned if {
	c := cfg([rep("/deploy/cells/replicas", 1), rep("/deploy/cells/min_available", 0)])
	"deploy.cells.replicas: 1; every rollout or node drain takes each cell's tenants offline while its pod restarts; run 2 or more" in warn_of(c)
}
