package cellgate.policy_test

test_shard_named_like_control_denied if {
	c := cfg([rep("/database/shards/1/name", "control")])
	"database.shards[1].name: \"control\" is the name of database.control; metrics and logs could not tell them apart" in deny_of(c)
}

test_shard_names_unlike_control_allowed if {
	not has(deny_of(base), "database.shards")
}

test_shard_local_shard_on_control_dsn_denied if {
	c := cfg([rep("/database/shards/0/dsn_env", "CELLGATE_CONTROL_DSN")])
	"database.shards[0].dsn_env: \"CELLGATE_CONTROL_DSN\" is also database.control.dsn_env; with jobs.postgres.shard_local two job runtimes would claim from one table" in deny_of(c)
}

test_shard_on_control_dsn_without_shard_local_allowed if {
	c := cfg([rep("/database/shards/0/dsn_env", "CELLGATE_CONTROL_DSN"), rep("/jobs/postgres/shard_local", false)])
	count(deny_of(c)) == 0
}

test_tenant_tables_with_control_only_migrations_warned if {
	c := cfg([
		{"op": "add", "path": "/database/app_migrations", "value": "control"},
		{"op": "add", "path": "/database/tenant_tables", "value": ["accounts"]},
	])
	"database.app_migrations: \"control\" creates the app's tables on the control database only, but database.tenant_tables names 1 tenant tables, which handlers and slotmove use on the shards; use \"shards\" or \"both\"" in warn_of(c)
}

test_tenant_tables_with_both_allowed if {
	c := cfg([
		{"op": "add", "path": "/database/app_migrations", "value": "both"},
		{"op": "add", "path": "/database/tenant_tables", "value": ["accounts"]},
	])
	not has(warn_of(c), "database.app_migrations")
}
