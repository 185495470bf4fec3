package mixin

import "time"

// Recording is one recording rule.
type Recording struct {
	// Record is the new series' name (level:metric:operation).
	Record string
	// Expr computes it.
	Expr string
}

// Alert is one alerting rule. Every alert has a section in docs/runbook.md
// whose anchor is its name in lower case.
type Alert struct {
	// Name starts with "Cellgate".
	Name string
	// Expr fires the alert for every series it returns.
	Expr string
	// For is how long Expr must hold before the alert fires.
	For time.Duration
	// Severity is "critical" (someone acts now) or "warning" (act today).
	Severity string
	// Summary and Description are the annotations; Description may use
	// $labels and $value.
	Summary, Description string
}

// Recordings are the mixin's recording rules: the per-cell aggregates the
// alerts and dashboards read. Cell-side series carry the label cell from
// the scrape config (the pod label cellgate.dev/cell); the router's carry
// it themselves.
var Recordings = []Recording{
	{"cell_kind:cellgate_tenant_bulkhead_rejections:rate5m",
		`sum by (cell, kind) (rate(cellgate_tenant_bulkhead_rejections_total[5m]))`},
	{"cell:cellgate_server_admission_rejections:rate5m",
		`sum by (cell) (rate(cellgate_server_admission_rejections_total[5m]))`},
	{"cell:cellgate_server_admission_utilisation:max",
		`max by (cell) (cellgate_server_in_flight_requests / (cellgate_server_max_concurrent_requests > 0))`},
	// The queue depth is the database's, so every pod of a cell reports
	// the same value: max, not sum.
	{"cell_queue:cellgate_jobs_queue_depth:max",
		`max by (cell, queue) (cellgate_jobs_queue_depth)`},
	{"cell_lane:cellgate_jobs_lane_busy_workers:sum",
		`sum by (cell, lane) (cellgate_jobs_lane_busy_workers)`},
	{"cell_route_code:cellgate_http_requests:rate5m",
		`sum by (cell, route, code) (rate(cellgate_http_requests_total[5m]))`},
	{"cell:cellgate_router_requests:rate5m",
		`sum by (cell) (rate(cellgate_router_requests_total[5m]))`},
}

// Alerts are the mixin's alerting rules.
var Alerts = []Alert{
	{
		Name:        "CellgateTenantBulkheadSaturated",
		Expr:        `cell_kind:cellgate_tenant_bulkhead_rejections:rate5m > 1`,
		For:         10 * time.Minute,
		Severity:    "warning",
		Summary:     "A tenant keeps hitting its bulkhead in cell {{ $labels.cell }}.",
		Description: "Cell {{ $labels.cell }} refuses {{ $value | humanize }} {{ $labels.kind }} admissions per second at a per-tenant bulkhead: one tenant asks for more than its cap. The other tenants are protected; find the tenant in the 503 logs and decide whether its cap or its traffic is wrong.",
	},
	{
		Name:        "CellgateServerAdmissionSaturated",
		Expr:        `cell:cellgate_server_admission_rejections:rate5m > 0 or cell:cellgate_server_admission_utilisation:max > 0.9`,
		For:         5 * time.Minute,
		Severity:    "critical",
		Summary:     "Cell {{ $labels.cell }} is at its server-wide request limit.",
		Description: "The server admission limit (server.max_concurrent_requests) of cell {{ $labels.cell }} is full or refusing requests: every tenant of the cell gets 503s, not only a noisy one. Add replicas, raise the limit if the pods have headroom, or move tenants to another cell.",
	},
	{
		Name:        "CellgateJobBacklogGrowing",
		Expr:        `cell_queue:cellgate_jobs_queue_depth:max > 100 and deriv(cell_queue:cellgate_jobs_queue_depth:max[15m]) > 0`,
		For:         15 * time.Minute,
		Severity:    "warning",
		Summary:     "Job queue {{ $labels.queue }} of cell {{ $labels.cell }} keeps growing.",
		Description: "Queue {{ $labels.queue }} of cell {{ $labels.cell }} holds {{ $value | humanize }} waiting jobs and grew over the last 15 minutes: workers finish fewer jobs than arrive. Check failing kinds, slow attempts and jobs.workers.",
	},
	{
		// There is no per-tenant wait series (tenant labels are
		// unbounded): the rule reads the jobs' wait per queue
		// (cellgate_job_wait_seconds) together with the skew of busy
		// workers across lanes (one lane full while the average is low:
		// one tenant's jobs own it), so a long wait with even lanes (too
		// few workers for everyone) is CellgateJobQueueGrowing's, not this.
		Name: "CellgateJobsQuietTenantsWaiting",
		Expr: `(max by (cell, queue) (histogram_quantile(0.9, sum by (cell, queue, le) (rate(cellgate_job_wait_seconds_bucket[10m])))) > 30)` +
			` and on (cell) (max by (cell) (cell_lane:cellgate_jobs_lane_busy_workers:sum) > 2 * avg by (cell) (cell_lane:cellgate_jobs_lane_busy_workers:sum))`,
		For:         15 * time.Minute,
		Severity:    "warning",
		Summary:     "Jobs of queue {{ $labels.queue }} in cell {{ $labels.cell }} wait over 30 s while one lane is busy.",
		Description: "In cell {{ $labels.cell }} one job in ten of queue {{ $labels.queue }} waits more than 30 s for its first attempt ({{ $value | humanizeDuration }} at p90) while the busiest job lane runs more than twice the average lane's workers: one tenant dominates the workers of its lanes and the quiet tenants that share them wait. Check jobs.tenants.max_concurrent, lanes and lanes_per_tenant.",
	},
	{
		Name:        "CellgateShardUnavailable",
		Expr:        `max by (cell, database) (cellgate_database_up) == 0`,
		For:         2 * time.Minute,
		Severity:    "critical",
		Summary:     "Database {{ $labels.database }} of cell {{ $labels.cell }} does not answer.",
		Description: "No pod of cell {{ $labels.cell }} reached database {{ $labels.database }} on its last readiness probes: the tenants whose slots it holds get errors and the cell is not ready. Check the database, its DSN Secret and the network path.",
	},
	{
		Name:        "CellgateCellDown",
		Expr:        `max by (cell) (cellgate_router_cell_up) == 0`,
		For:         2 * time.Minute,
		Severity:    "critical",
		Summary:     "Every router sees cell {{ $labels.cell }} down.",
		Description: "The routers mark cell {{ $labels.cell }} down (its /readyz fails or its connections break): the tenants of its slots get 503 from the router. Check the cell's pods, readiness and databases.",
	},
	{
		Name:        "CellgateSlotMapReloadFailing",
		Expr:        `sum by (namespace, pod) (increase(cellgate_router_slotmap_reloads_total{result=~"invalid|unreadable"}[10m])) > 0 or min by (namespace, pod) (cellgate_router_slotmap_current) == 0`,
		For:         5 * time.Minute,
		Severity:    "critical",
		Summary:     "Router {{ $labels.pod }} rejects its slot map file.",
		Description: "Router {{ $labels.pod }} cannot load its slot map file (invalid or unreadable) and keeps routing with the last good map, so a slot move or a new cell is not in effect. Fix the router-slotmap ConfigMap; `make generate` writes a valid one.",
	},
	{
		Name:        "CellgateMigrationsFailing",
		Expr:        `max by (cell) (cellgate_migrations_failed) == 1 or max by (cell, database) (cellgate_jobs_database_ready == 0)`,
		For:         5 * time.Minute,
		Severity:    "critical",
		Summary:     "Migrations of cell {{ $labels.cell }} do not apply.",
		Description: "A migration of cell {{ $labels.cell }} failed (the app's, or the job runtime's on the database of the alert's database label): the cell stays unready and serves nothing until the migration is repaired. /readyz and the pod's logs name the database, the file, PostgreSQL's error and the repair.",
	},
}
