package cellgate.policy

# Kubernetes deploy block: the generated manifests (gen/deploy/kubernetes)
# must be applicable and must keep a cell up through drains and rollouts.

# A PodDisruptionBudget with minAvailable >= replicas never lets a pod be
# evicted: `kubectl drain` of a node hangs until someone deletes the budget.
deny contains msg if {
	some w in ["cells", "router"]
	d := object.get(input, ["deploy", w], {})
	replicas := num(d, "replicas")
	replicas > 0
	min := num(d, "min_available")
	min >= replicas
	msg := sprintf("deploy.%s.min_available: %d with %d replicas leaves no pod evictable, so a node drain would block; set min_available <= %d", [w, min, replicas, replicas - 1])
}

# With several cells the router is the one shared front door: one replica
# would make every rollout or node drain of it an outage of every cell.
deny contains msg if {
	count(arr(input.cells)) > 1
	replicas := num(object.get(input, ["deploy", "router"], {}), "replicas")
	replicas > 0
	replicas < 2
	msg := sprintf("deploy.router.replicas: %d with %d cells; the router fronts every cell, so run at least 2", [replicas, count(arr(input.cells))])
}

# After SIGTERM a pod sleeps pre_stop_sleep (endpoints drain), the server
# drains requests within server.shutdown_timeout, then the jobs drain within
# jobs.shutdown_timeout. A grace period not above the sum kills a pod
# mid-drain.
deny contains msg if {
	grace := duration_ns(input.deploy.termination_grace_period)
	pre := duration_ns(object.get(input.deploy, "pre_stop_sleep", "0s"))
	srv := duration_ns(object.get(input.server, "shutdown_timeout", "0s"))
	job := duration_ns(object.get(input.jobs, "shutdown_timeout", "0s"))
	grace <= (pre + srv) + job
	msg := sprintf("deploy.termination_grace_period: %s is not above deploy.pre_stop_sleep (%s) + server.shutdown_timeout (%s) + jobs.shutdown_timeout (%s); Kubernetes would kill pods mid-drain; raise it above %s", [input.deploy.termination_grace_period, seconds(pre), seconds(srv), seconds(job), seconds((pre + srv) + job)])
}

# Kubernetes grace periods and probe sleeps are whole seconds.
deny contains msg if {
	some k in ["termination_grace_period", "pre_stop_sleep"]
	v := object.get(input, ["deploy", k], null)
	v != null
	ns := duration_ns(v)
	ns % 1000000000 != 0
	msg := sprintf("deploy.%s: %s is not a whole number of seconds; Kubernetes counts it in seconds", [k, v])
}

# Every cell is a Deployment, Service and Secret named after it (the Secret
# "<cell>-secrets", the ConfigMap "<cell>-config"), so its name must be an
# RFC 1123 label short enough for the longest suffix.
deny contains msg if {
	some i, c in arr(input.cells)
	not regex.match(`^[a-z0-9]([a-z0-9-]{0,53}[a-z0-9])?$`, c.name)
	msg := sprintf("cells[%d].name: %s is not a Kubernetes name (lower-case letters, digits and '-', at most 55 characters, starting and ending alphanumeric); its Deployment, Service and Secret are named after it", [i, json.marshal(c.name)])
}

deny contains msg if {
	some i, c in arr(input.cells)
	c.name == "router"
	msg := sprintf("cells[%d].name: \"router\" is the router's name in the generated manifests; rename the cell", [i])
}

# A single replica per cell means every rollout and node drain takes the
# cell's tenants offline for the restart.
warn contains msg if {
	num(object.get(input, ["deploy", "cells"], {}), "replicas") == 1
	msg := "deploy.cells.replicas: 1; every rollout or node drain takes each cell's tenants offline while its pod restarts; run 2 or more"
}

# seconds formats nanoseconds as a duration string in seconds ("15s").
seconds(ns) := sprintf("%ss", [format_int(ns / 1000000000, 10)]) if {
	ns % 1000000000 == 0
} else := sprintf("%vs", [ns / 1000000000])
