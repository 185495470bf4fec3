package cellgate.policy

# Jobs: tenant job isolation (lanes, slots), shard-local tables, job kinds,
# and how job workers share database pools.

tenant_job_settings := [k |
	some k in ["max_concurrent", "lanes", "lanes_per_tenant"]
	num(input.jobs.tenants, k) > 0
]

# Worker i serves lane i % lanes: a lane past the worker count has no worker.
# The runtime clamps and logs, but the spec asked for something it cannot get.
deny contains msg if {
	lanes := num(input.jobs.tenants, "lanes")
	workers := num(input.jobs, "workers")
	lanes > workers
	msg := sprintf("jobs.tenants.lanes: %d lanes but only %d workers; worker i serves lane i %% lanes, so lanes past jobs.workers have no worker (the runtime would clamp to %d); set lanes <= workers", [lanes, workers, workers])
}

deny contains msg if {
	lanes := num(input.jobs.tenants, "lanes")
	per := num(input.jobs.tenants, "lanes_per_tenant")
	lanes > 0
	not between(per, 1, lanes)
	msg := sprintf("jobs.tenants.lanes_per_tenant: %d with %d lanes; each tenant is served by between 1 and %d lanes", [per, lanes, lanes])
}

between(x, lo, hi) if {
	x >= lo
	x <= hi
}

warn contains msg if {
	num(input.jobs.tenants, "lanes") == 0
	per := num(input.jobs.tenants, "lanes_per_tenant")
	per > 0
	msg := sprintf("jobs.tenants.lanes_per_tenant: %d has no effect while jobs.tenants.lanes is 0 (shuffle sharding off); set lanes or drop lanes_per_tenant", [per])
}

# Every tenant on every lane is the same as no lanes: a noisy tenant reaches
# every worker.
warn contains msg if {
	lanes := num(input.jobs.tenants, "lanes")
	lanes > 0
	num(input.jobs.tenants, "lanes_per_tenant") == lanes
	msg := sprintf("jobs.tenants.lanes_per_tenant: %d of %d lanes serves every tenant on every lane, so lanes isolate nothing; use fewer lanes per tenant (2 of 8 gives 28 distinct pairs)", [lanes, lanes])
}

# Without lanes, a tenant slot count of at least the worker count lets one
# tenant occupy every worker.
warn contains msg if {
	mc := num(input.jobs.tenants, "max_concurrent")
	workers := num(input.jobs, "workers")
	mc > 0
	mc >= workers
	num(input.jobs.tenants, "lanes") == 0
	msg := sprintf("jobs.tenants.max_concurrent: %d jobs per tenant with %d workers; one tenant can still occupy every worker; set it below jobs.workers or use lanes", [mc, workers])
}

warn contains msg if {
	input.jobs.backend == "postgres"
	count(tenant_job_settings) > 0
	msg := sprintf("jobs.tenants: %s apply to the local backend only; the postgres backend has no tenant slots or lanes (it isolates tenants by claiming round-robin across them, jobs.postgres.claim = \"fair\", and by shard with jobs.postgres.shard_local)", [concat(", ", tenant_job_settings)])
}

warn contains msg if {
	not tenancy_enabled
	count(tenant_job_settings) > 0
	msg := sprintf("jobs.tenants: %s set while tenancy.enabled is false; a job's tenant is the tenant of the request that enqueued it, so every job is tenant-less and unlimited", [concat(", ", tenant_job_settings)])
}

deny contains msg if {
	input.jobs.postgres.shard_local == true
	input.jobs.backend != "postgres"
	msg := sprintf("jobs.postgres.shard_local: true needs jobs.backend \"postgres\", not %s; shard-local job tables live in the shard databases", [json.marshal(input.jobs.backend)])
}

# Job kinds -----------------------------------------------------------------

job_kinds := arr(input.jobs.kinds)

deny contains msg if {
	some d in duplicates([k.name | some k in job_kinds])
	msg := sprintf("jobs.kinds[%d].name: %s is also jobs.kinds[%d].name; job kind names must be unique", [d[0], json.marshal(d[2]), d[1]])
}

deny contains msg if {
	some i, kind in job_kinds
	args := arr(kind.args)
	some d in duplicates([a.name | some a in args])
	msg := sprintf("jobs.kinds[%d].args[%d].name: %s is also jobs.kinds[%d].args[%d].name; arg names of %s must be unique", [i, d[0], json.marshal(d[2]), i, d[1], kind.name])
}

deny contains msg if {
	some i, kind in job_kinds
	names := {a.name | some a in arr(kind.args)}
	some j, u in arr(kind.unique_by)
	not u in names
	msg := sprintf("jobs.kinds[%d].unique_by[%d]: %s is not an arg of %s (%s)", [i, j, json.marshal(u), kind.name, arg_list(names)])
}

arg_list(names) := "it has no args" if {
	count(names) == 0
} else := concat("", ["args: ", concat(", ", sort(names))])

# Pools: a job holds a connection while it runs --------------------------------

warn contains msg if {
	input.jobs.backend == "postgres"
	workers := num(input.jobs, "workers")
	conns := num(input.database.control, "max_conns")
	workers >= conns
	msg := sprintf("database.control.max_conns: %d connections but jobs.workers is %d; running jobs each hold one, leaving none for enqueues and maintenance; raise max_conns above jobs.workers", [conns, workers])
}

# smallest_shard_pool is the smallest max_conns of any shard; one pass over
# the shards, shared by every rule that compares a count with the pools.
smallest_shard_pool := min([c | some s in shard_list; c := s.max_conns])

warn contains msg if {
	input.jobs.backend == "postgres"
	input.jobs.postgres.shard_local == true
	workers := num(input.jobs, "workers")
	workers >= smallest_shard_pool
	some i, s in shard_list
	conns := s.max_conns
	workers >= conns
	msg := sprintf("database.shards[%d].max_conns: %d connections but shard-local jobs run jobs.workers = %d workers on %s, each holding one; requests would wait for a connection; raise max_conns above jobs.workers", [i, conns, workers, s.name])
}

# Periodic jobs ---------------------------------------------------------------

periodic_jobs := arr(input.jobs.periodic)

kind_by_name := {k.name: k | some k in job_kinds}

deny contains msg if {
	some d in duplicates([p.name | some p in periodic_jobs])
	msg := sprintf("jobs.periodic[%d].name: %s is also jobs.periodic[%d].name; the name keys the entry's stored schedule, so it must be unique", [d[0], json.marshal(d[2]), d[1]])
}

deny contains msg if {
	some i, p in periodic_jobs
	not kind_by_name[p.kind]
	msg := sprintf("jobs.periodic[%d].kind: %s is not one of jobs.kinds (%s)", [i, json.marshal(p.kind), concat(", ", sort(object.keys(kind_by_name)))])
}

deny contains msg if {
	some i, p in periodic_jobs
	not periodic_has_one_schedule(p)
	msg := sprintf("jobs.periodic[%d]: %s sets %s; set exactly one of every and cron", [i, p.name, periodic_schedule_fields(p)])
}

periodic_has_one_schedule(p) if count(periodic_schedules(p)) == 1

periodic_schedules(p) := [f | some f in ["every", "cron"]; object.get(p, f, "") != ""]

periodic_schedule_fields(p) := "neither every nor cron" if {
	count(periodic_schedules(p)) == 0
} else := "both every and cron"

deny contains msg if {
	some i, p in periodic_jobs
	object.get(p, "every", "") != ""
	object.get(p, "time_zone", "") != ""
	msg := sprintf("jobs.periodic[%d].time_zone: %s applies to cron only; every counts from the Unix epoch", [i, json.marshal(p.time_zone)])
}

# Five fields of the characters cron uses, or a descriptor; the runtime's
# parser (robfig/cron) checks the ranges when the server starts.
cron_shape := `^(@(hourly|daily|midnight|weekly|monthly|yearly|annually)|[0-9*,/?A-Za-z-]+( +[0-9*,/?A-Za-z-]+){4})$`

deny contains msg if {
	some i, p in periodic_jobs
	object.get(p, "cron", "") != ""
	not regex.match(cron_shape, trim_space(p.cron))
	msg := sprintf("jobs.periodic[%d].cron: %s is not a five-field cron expression (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly", [i, json.marshal(p.cron)])
}

# The time zone and the cron fields' ranges are start-up rules
# (configload.StartRules: the Go time zone database and cron parser).

deny contains msg if {
	some i, p in periodic_jobs
	kind := kind_by_name[p.kind]
	names := {a.name | some a in arr(kind.args)}
	some k, _ in object.get(p, "args", {})
	not k in names
	msg := sprintf("jobs.periodic[%d].args.%s: not an arg of %s (%s)", [i, k, kind.name, arg_list(names)])
}

deny contains msg if {
	some i, p in periodic_jobs
	kind := kind_by_name[p.kind]
	some a in arr(kind.args)
	v := object.get(p, "args", {})[a.name]
	not arg_value_fits(a.type, v)
	msg := sprintf("jobs.periodic[%d].args.%s: %s does not fit %s's %s arg", [i, a.name, json.marshal(v), kind.name, a.type])
}

arg_value_fits("string", v) if is_string(v)

arg_value_fits("time", v) if {
	is_string(v)
	time.parse_rfc3339_ns(v)
}

arg_value_fits("bool", v) if is_boolean(v)

arg_value_fits("float64", v) if is_number(v)

arg_value_fits("int64", v) if {
	is_number(v)
	round(v) == v
}
