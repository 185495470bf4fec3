package cellgate.policy

# Database: the control database beside the shards. Both rules test set
# membership first, so 1,024 shards cost one pass (shared with names.rego).

deny contains msg if {
	control := input.database.control.name
	shard_names[control]
	some i, s in shard_list
	s.name == control
	msg := sprintf("database.shards[%d].name: %s is the name of database.control; metrics and logs could not tell them apart", [i, json.marshal(s.name)])
}

# With shard-local jobs the control database and every shard each get a jobs
# table, workers and a maintenance loop; one database behind both names would
# run two job runtimes on one table.
deny contains msg if {
	input.jobs.postgres.shard_local == true
	control := input.database.control.dsn_env
	shard_dsn_envs[control]
	some i, s in shard_list
	s.dsn_env == control
	msg := sprintf("database.shards[%d].dsn_env: %s is also database.control.dsn_env; with jobs.postgres.shard_local two job runtimes would claim from one table", [i, json.marshal(s.dsn_env)])
}

# Tenant tables hold tenant rows, which handlers (shards.Accessor) and
# slotmove use on the shards: with the app's migrations on the control
# database only, the shards would not have them.
warn contains msg if {
	input.database.app_migrations == "control"
	n := count(object.get(input.database, "tenant_tables", []))
	n > 0
	msg := sprintf("database.app_migrations: \"control\" creates the app's tables on the control database only, but database.tenant_tables names %d tenant tables, which handlers and slotmove use on the shards; use \"shards\" or \"both\"", [n])
}
