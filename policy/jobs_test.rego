package cellgate.policy_test

# local_jobs: the local backend (shard_local off), so the tests of tenant job
# isolation see no postgres-only warnings.
local_jobs(ops) := cfg(array.concat(
	[
		rep("/jobs/backend", "local"),
		rep("/jobs/postgres/shard_local", false),
	],
	ops,
))

# jobs.tenants.lanes <= jobs.workers

test_lanes_above_workers_denied if {
	c := local_jobs([rep("/jobs/workers", 8), rep("/jobs/tenants/lanes", 12), rep("/jobs/tenants/lanes_per_tenant", 2)])
	"jobs.tenants.lanes: 12 lanes but only 8 workers; worker i serves lane i % lanes, so lanes past jobs.workers have no worker (the runtime would clamp to 8); set lanes <= workers" in deny_of(c)
}

test_lanes_equal_workers_allowed if {
	c := local_jobs([rep("/jobs/workers", 8), rep("/jobs/tenants/lanes", 8), rep("/jobs/tenants/lanes_per_tenant", 2)])
	count(deny_of(c)) == 0
}

# 1 <= lanes_per_tenant <= lanes when lanes > 0

test_lanes_per_tenant_zero_denied if {
	c := local_jobs([rep("/jobs/workers", 8), rep("/jobs/tenants/lanes", 8)])
	"jobs.tenants.lanes_per_tenant: 0 with 8 lanes; each tenant is served by between 1 and 8 lanes" in deny_of(c)
}

test_lanes_per_tenant_above_lanes_denied if {
	c := local_jobs([rep("/jobs/workers", 8), rep("/jobs/tenants/lanes", 4), rep("/jobs/tenants/lanes_per_tenant", 5)])
	has(deny_of(c), "jobs.tenants.lanes_per_tenant: 5 with 4 lanes;")
}

test_lanes_per_tenant_in_range_allowed if {
	c := local_jobs([rep("/jobs/workers", 8), rep("/jobs/tenants/lanes", 8), rep("/jobs/tenants/lanes_per_tenant", 1)])
	not has(deny_of(c), "jobs.tenants.lanes_per_tenant")
	not has(warn_of(c), "jobs.tenants.lanes_per_tenant")
}

# lanes_per_tenant without lanes: no effect

test_lanes_per_tenant_without_lanes_warned if {
	c := local_jobs([rep("/jobs/tenants/lanes_per_tenant", 2)])
	"jobs.tenants.lanes_per_tenant: 2 has no effect while jobs.tenants.lanes is 0 (shuffle sharding off); set lanes or drop lanes_per_tenant" in warn_of(c)
	not has(deny_of(c), "jobs.tenants.lanes_per_tenant")
}

test_no_lanes_no_lanes_per_tenant_quiet if {
	c := local_jobs([])
	not has(warn_of(c), "jobs.tenants")
}

# every tenant on every lane

test_lanes_per_tenant_equal_lanes_warned if {
	c := local_jobs([rep("/jobs/workers", 4), rep("/jobs/tenants/lanes", 4), rep("/jobs/tenants/lanes_per_tenant", 4)])
	has(warn_of(c), "jobs.tenants.lanes_per_tenant: 4 of 4 lanes serves every tenant on every lane")
	count(deny_of(c)) == 0
}

test_lanes_per_tenant_below_lanes_quiet if {
	c := local_jobs([rep("/jobs/workers", 4), rep("/jobs/tenants/lanes", 4), rep("/jobs/tenants/lanes_per_tenant", 3)])
	count(warn_of(c)) == 0
}

# max_concurrent >= workers without lanes

test_max_concurrent_at_workers_warned if {
	c := local_jobs([rep("/jobs/workers", 4), rep("/jobs/tenants/max_concurrent", 4)])
	"jobs.tenants.max_concurrent: 4 jobs per tenant with 4 workers; one tenant can still occupy every worker; set it below jobs.workers or use lanes" in warn_of(c)
}

test_max_concurrent_below_workers_quiet if {
	c := local_jobs([rep("/jobs/workers", 4), rep("/jobs/tenants/max_concurrent", 3)])
	count(warn_of(c)) == 0
}

test_max_concurrent_at_workers_with_lanes_quiet if {
	c := local_jobs([rep("/jobs/workers", 4), rep("/jobs/tenants/max_concurrent", 4), rep("/jobs/tenants/lanes", 4), rep("/jobs/tenants/lanes_per_tenant", 2)])
	count(warn_of(c)) == 0
}

# tenant job settings on the postgres backend

test_tenant_job_settings_on_postgres_warned if {
	c := cfg([rep("/jobs/tenants/max_concurrent", 2), rep("/jobs/tenants/lanes", 4), rep("/jobs/tenants/lanes_per_tenant", 2)])
	has(warn_of(c), "jobs.tenants: max_concurrent, lanes, lanes_per_tenant apply to the local backend only;")
}

test_tenant_job_settings_on_local_quiet if {
	c := local_jobs([rep("/jobs/tenants/max_concurrent", 2)])
	not has(warn_of(c), "jobs.tenants:")
}

# tenant job settings without tenancy

test_tenant_job_settings_without_tenancy_warned if {
	c := local_jobs([rep("/tenancy/enabled", false), rep("/jobs/tenants/max_concurrent", 2), rep("/routes", [])])
	"jobs.tenants: max_concurrent set while tenancy.enabled is false; a job's tenant is the tenant of the request that enqueued it, so every job is tenant-less and unlimited" in warn_of(c)
}

test_no_tenant_job_settings_without_tenancy_quiet if {
	c := local_jobs([rep("/tenancy/enabled", false), rep("/routes", [])])
	count(warn_of(c)) == 0
}

# shard_local needs the postgres backend

test_shard_local_on_local_backend_denied if {
	c := cfg([rep("/jobs/backend", "local")])
	"jobs.postgres.shard_local: true needs jobs.backend \"postgres\", not \"local\"; shard-local job tables live in the shard databases" in deny_of(c)
}

test_shard_local_on_postgres_allowed if {
	not has(deny_of(base), "jobs.postgres.shard_local")
}

# job kinds

kind(name, args, unique_by) := {
	"name": name, "queue": "default", "args": args,
	"max_attempts": 25, "timeout": "1m", "concurrency": 0, "unique_by": unique_by,
}

arg(name) := {"name": name, "type": "string"}

test_duplicate_kind_names_denied if {
	c := cfg([rep("/jobs/kinds", [kind("a", [], []), kind("b", [], []), kind("a", [], [])])])
	"jobs.kinds[2].name: \"a\" is also jobs.kinds[0].name; job kind names must be unique" in deny_of(c)
}

test_distinct_kind_names_allowed if {
	c := cfg([rep("/jobs/kinds", [kind("a", [], []), kind("b", [], [])])])
	count(deny_of(c)) == 0
}

test_duplicate_arg_names_denied if {
	c := cfg([rep("/jobs/kinds", [kind("a", [arg("x"), arg("y"), arg("x")], [])])])
	"jobs.kinds[0].args[2].name: \"x\" is also jobs.kinds[0].args[0].name; arg names of a must be unique" in deny_of(c)
}

test_distinct_arg_names_allowed if {
	c := cfg([rep("/jobs/kinds", [kind("a", [arg("x"), arg("y")], ["x", "y"])])])
	count(deny_of(c)) == 0
}

test_unique_by_unknown_arg_denied if {
	c := cfg([rep("/jobs/kinds/0/unique_by", ["account_id", "acct"])])
	"jobs.kinds[0].unique_by[1]: \"acct\" is not an arg of send_welcome (args: account_id, email)" in deny_of(c)
}

test_unique_by_on_kind_without_args_denied if {
	c := cfg([rep("/jobs/kinds", [kind("a", [], ["x"])])])
	"jobs.kinds[0].unique_by[0]: \"x\" is not an arg of a (it has no args)" in deny_of(c)
}

test_unique_by_known_args_allowed if {
	not has(deny_of(base), "jobs.kinds")
}

# pools: job workers hold connections

test_workers_fill_control_pool_warned if {
	c := cfg([rep("/jobs/workers", 10)])
	has(warn_of(c), "database.control.max_conns: 10 connections but jobs.workers is 10;")
}

test_workers_below_control_pool_quiet if {
	c := cfg([rep("/jobs/workers", 9), rep("/database/shards/0/max_conns", 20), rep("/database/shards/1/max_conns", 20)])
	count(warn_of(c)) == 0
}

test_control_pool_not_used_by_local_jobs_quiet if {
	c := local_jobs([rep("/jobs/workers", 50)])
	not has(warn_of(c), "database.control.max_conns")
}

test_shard_local_workers_fill_shard_pool_warned if {
	c := cfg([rep("/jobs/workers", 8), rep("/database/shards/1/max_conns", 8)])
	has(warn_of(c), "database.shards[1].max_conns: 8 connections but shard-local jobs run jobs.workers = 8 workers on shard-1")
	not has(warn_of(c), "database.shards[0]")
}

test_shard_pool_without_shard_local_quiet if {
	c := cfg([rep("/jobs/workers", 8), rep("/database/shards/1/max_conns", 8), rep("/jobs/postgres/shard_local", false)])
	not has(warn_of(c), "database.shards")
}

# Periodic jobs

periodic(entry) := cfg([rep("/jobs/periodic", [object.union({"name": "nightly", "kind": "send_welcome", "args": {}, "time_zone": "", "run_on_start": false, "catch_up": "once"}, entry)])])

test_periodic_valid_allowed if {
	c := periodic({"cron": "0 3 * * *", "time_zone": "Europe/Paris", "args": {"account_id": 7, "email": "a@b.c"}})
	not has(deny_of(c), "jobs.periodic")
	c2 := periodic({"every": "1h"})
	not has(deny_of(c2), "jobs.periodic")
}

test_periodic_unknown_kind_denied if {
	has(deny_of(periodic({"kind": "nope", "every": "1h"})), "jobs.periodic[0].kind: \"nope\" is not one of jobs.kinds (send_welcome)")
}

test_periodic_schedule_exactly_one if {
	has(deny_of(periodic({})), "jobs.periodic[0]: nightly sets neither every nor cron")
	has(deny_of(periodic({"every": "1h", "cron": "@daily"})), "jobs.periodic[0]: nightly sets both every and cron")
}

test_periodic_bad_cron_denied if {
	has(deny_of(periodic({"cron": "0 3 * *"})), "jobs.periodic[0].cron: \"0 3 * *\" is not a five-field cron expression")
}

test_periodic_bad_zone_denied if {
	has(deny_of(periodic({"every": "1h", "time_zone": "UTC"})), "jobs.periodic[0].time_zone: \"UTC\" applies to cron only")
}

test_periodic_args_checked if {
	has(deny_of(periodic({"every": "1h", "args": {"nope": 1}})), "jobs.periodic[0].args.nope: not an arg of send_welcome (args: account_id, email)")
	has(deny_of(periodic({"every": "1h", "args": {"account_id": "seven"}})), "jobs.periodic[0].args.account_id: \"seven\" does not fit send_welcome's int64 arg")
	has(deny_of(periodic({"every": "1h", "args": {"account_id": 1.5}})), "jobs.periodic[0].args.account_id: 1.5 does not fit send_welcome's int64 arg")
}
