package cellgate.policy_test

shard(name, env, slots) := {"name": name, "dsn_env": env, "slots": slots, "max_conns": 10}

cell(name, url, slots) := {"name": name, "url": url, "slots": slots}

test_duplicate_shard_names_denied if {
	c := cfg([rep("/database/shards/1/name", "shard-0")])
	"database.shards[1].name: \"shard-0\" is also database.shards[0].name; shard names must be unique" in deny_of(c)
}

test_thrice_used_shard_name_denied_twice if {
	c := cfg([add("/database/shards/-", shard("shard-0", "C", [])), rep("/database/shards/1/name", "shard-0")])
	"database.shards[1].name: \"shard-0\" is also database.shards[0].name; shard names must be unique" in deny_of(c)
	"database.shards[2].name: \"shard-0\" is also database.shards[1].name; shard names must be unique" in deny_of(c)
}

test_distinct_shard_names_allowed if {
	not has(deny_of(base), "database.shards")
}

test_duplicate_shard_dsn_env_denied if {
	c := cfg([rep("/database/shards/1/dsn_env", "CELLGATE_SHARD_0_DSN")])
	"database.shards[1].dsn_env: \"CELLGATE_SHARD_0_DSN\" is also database.shards[0].dsn_env; each shard needs its own database" in deny_of(c)
}

test_distinct_shard_dsn_env_allowed if {
	c := cfg([rep("/database/shards/1/dsn_env", "CELLGATE_SHARD_9_DSN")])
	count(deny_of(c)) == 0
}

two_cells(url1, url2) := cfg([rep("/cells", [
	cell("cell-1", url1, ["0-8191"]),
	cell("cell-2", url2, ["8192-16383"]),
])])

test_duplicate_cell_names_denied if {
	c := cfg([rep("/cells", [cell("cell-1", "http://a", ["0-8191"]), cell("cell-1", "http://b", ["8192-16383"])])])
	"cells[1].name: \"cell-1\" is also cells[0].name; cell names must be unique" in deny_of(c)
}

test_distinct_cell_names_allowed if {
	count(deny_of(two_cells("http://a:8080", "http://b:8080"))) == 0
}

test_duplicate_cell_urls_denied if {
	c := two_cells("http://cell-1.internal", "HTTP://Cell-1.internal/")
	"cells[1].url: \"HTTP://Cell-1.internal/\" is also cells[0].url; each cell is its own deployment" in deny_of(c)
}

test_distinct_cell_urls_allowed if {
	c := two_cells("http://cell-1.internal", "http://cell-2.internal")
	not has(deny_of(c), "cells")
}

route(method, path, handler) := {"method": method, "path": path, "handler": handler, "public": false, "idempotent": false}

test_duplicate_route_denied if {
	c := cfg([add("/routes/-", route("GET", "/orders", "ListOrders2"))])
	"routes[5] (GET /orders): same method and path as routes[4] (GET /orders); Echo cannot register both" in deny_of(c)
}

test_duplicate_route_with_renamed_param_denied if {
	c := cfg([
		add("/routes/-", route("GET", "/orders/{id}", "GetOrder")),
		add("/routes/-", route("GET", "/orders/{oid}", "GetOrder2")),
	])
	has(deny_of(c), "routes[6] (GET /orders/{oid}): same method and path as routes[5] (GET /orders/{id})")
}

test_same_path_other_method_allowed if {
	c := cfg([add("/routes/-", route("DELETE", "/orders", "DeleteOrders"))])
	count(deny_of(c)) == 0
}

test_duplicate_handler_denied if {
	c := cfg([add("/routes/-", route("DELETE", "/orders", "ListOrders"))])
	"routes[5].handler: \"ListOrders\" is also routes[4].handler; each route needs its own method on the generated Handler interface" in deny_of(c)
}

test_distinct_handlers_allowed if {
	not has(deny_of(base), "routes")
}
