package cellgate.policy_test

import data.cellgate.policy

# base is testdata/default.json: the generator's export of schema/app.cue.
# Every test patches it (RFC 6902 ops through json.patch) so that each one
# changes exactly the settings it is about.
base := {
	"service": {
		"name": "example",
	},
	"server": {
		"address": ":8080",
		"max_concurrent_requests": 0,
		"read_header_timeout": "5s",
		"read_timeout": "30s",
		"body_read_timeout": "20s",
		"body_min_bytes_per_second": 1024,
		"body_rate_grace": "5s",
		"write_timeout": "0s",
		"idle_timeout": "120s",
		"request_timeout": "30s",
		"shutdown_timeout": "15s",
		"body_limit_bytes": 1048576,
		"admin_token_env": "CELLGATE_ADMIN_TOKEN",
		"operator_token_env": "CELLGATE_OPERATOR_TOKEN",
		"idempotency": {
			"ttl": "24h",
			"lease": "60s",
			"sweep_interval": "1m",
		},
	},
	"tenancy": {
		"enabled": true,
		"source": "header",
		"header": {
			"name": "X-Tenant-ID",
		},
		"subdomain": {
			"base_domain": "localhost",
		},
		"session": {
			"cookie": "cellgate_session",
			"key_env": "CELLGATE_SESSION_KEY",
		},
		"jwt": {
			"algorithms": [
				"HS256",
			],
			"key_env": "",
			"key_file": "",
			"jwks_file": "",
			"jwks_url": "",
			"jwks_refresh": "15m",
			"jwks_unknown_kid_interval": "10s",
			"jwks_timeout": "10s",
			"issuer": "",
			"audience": "",
			"claim": "tenant",
			"leeway": "0s",
			"plan_claim": "",
		},
		"max_id_bytes": 64,
		"max_concurrent_requests": 0,
		"max_db_connections": 0,
		"rate_per_second": 0,
		"burst": 0,
		"public_paths": [],
		"plans": [],
		"default_plan": "",
	},
	"admission": {
		"shards": 1,
		"lease_size": 64,
		"overage_allowance": 0,
		"funding": 0,
		"max_accounts": 100000,
		"idle_after": "10m",
	},
	"router": {
		"max_in_flight_per_cell": 1024,
		"max_in_flight_per_tenant": 256,
		"body_timeout": "30s",
		"min_body_bytes_per_second": 1024,
		"body_rate_grace": "5s",
		"admin_token_env": "CELLGATE_ROUTER_ADMIN_TOKEN",
	},
	"console": {
		"trusted_proxies": [],
		"secure_cookies": false,
		"session_idle": "15m",
		"session_ttl": "8h",
	},
	"jobs": {
		"backend": "postgres",
		"workers": 4,
		"tenants": {
			"max_concurrent": 0,
			"lanes": 0,
			"lanes_per_tenant": 0,
		},
		"postgres": {
			"shard_local": true,
			"claim": "fair",
			"rescue_after": "5m",
			"retention": "24h",
			"breaker_failures": 5,
			"breaker_cooldown": "10s",
		},
		"shutdown_timeout": "10s",
		"kinds": [
			{
				"name": "send_welcome",
				"queue": "default",
				"args": [
					{
						"name": "account_id",
						"type": "int64",
					},
					{
						"name": "email",
						"type": "string",
					},
				],
				"max_attempts": 5,
				"timeout": "30s",
				"concurrency": 0,
				"unique_by": [
					"account_id",
				],
			},
		],
		"periodic": [],
	},
	"database": {
		"control": {
			"name": "control",
			"dsn_env": "CELLGATE_CONTROL_DSN",
			"max_conns": 10,
		},
		"shards": [
			{
				"name": "shard-0",
				"dsn_env": "CELLGATE_SHARD_0_DSN",
				"slots": [],
				"max_conns": 10,
			},
			{
				"name": "shard-1",
				"dsn_env": "CELLGATE_SHARD_1_DSN",
				"slots": [],
				"max_conns": 10,
			},
		],
	},
	"cells": [
		{
			"name": "cell-1",
			"url": "http://127.0.0.1:8080",
			"slots": [],
		},
	],
	"routes": [
		{
			"method": "GET",
			"path": "/",
			"handler": "Index",
			"public": true,
			"idempotent": false,
		},
		{
			"method": "POST",
			"path": "/signup",
			"handler": "SignUp",
			"public": false,
			"idempotent": true,
		},
		{
			"method": "GET",
			"path": "/account",
			"handler": "GetAccount",
			"public": false,
			"idempotent": false,
		},
		{
			"method": "POST",
			"path": "/orders",
			"handler": "CreateOrder",
			"public": false,
			"idempotent": true,
		},
		{
			"method": "GET",
			"path": "/orders",
			"handler": "ListOrders",
			"public": false,
			"idempotent": false,
		},
	],
	"deploy": {
		"image": "cellgate:dev",
		"image_pull_policy": "IfNotPresent",
		"namespace": "cellgate",
		"monitoring_namespace": "monitoring",
		"labels": {},
		"cells": {
			"replicas": 2,
			"min_available": 1,
			"resources": {
				"requests": {
					"cpu": "250m",
					"memory": "256Mi",
				},
				"limits": {
					"cpu": "",
					"memory": "512Mi",
				},
			},
		},
		"router": {
			"replicas": 2,
			"min_available": 1,
			"resources": {
				"requests": {
					"cpu": "250m",
					"memory": "256Mi",
				},
				"limits": {
					"cpu": "",
					"memory": "512Mi",
				},
			},
			"port": 8090,
		},
		"termination_grace_period": "45s",
		"pre_stop_sleep": "5s",
		"probes": {
			"period_seconds": 5,
			"timeout_seconds": 3,
			"failure_threshold": 3,
			"startup_failure_threshold": 60,
		},
	},
}

# cfg returns base with the given patch ops applied.
cfg(ops) := json.patch(base, ops)

rep(path, value) := {"op": "replace", "path": path, "value": value}

add(path, value) := {"op": "add", "path": path, "value": value}

deny_of(c) := d if {
	d := policy.deny with input as c
}

warn_of(c) := w if {
	w := policy.warn with input as c
}

# has(msgs, prefix): some message starts with prefix (the spec path).
has(msgs, prefix) if {
	some m in msgs
	startswith(m, prefix)
}

test_base_has_no_deny_and_no_warn if {
	count(deny_of(base)) == 0
	count(warn_of(base)) == 0
}
