package mixin

// Dashboard is one Grafana dashboard: rows of time-series panels.
type Dashboard struct {
	// UID is Grafana's id and the file name.
	UID string
	// Title is shown in Grafana.
	Title string
	// Panels in order, laid out two per row.
	Panels []Panel
	// TracePanels are the titles of the latency panels that show the
	// histograms' exemplars (trace ids, when the cells trace) and link to
	// the trace backend ($traces, a Tempo data source) for the panel's
	// cells and time range.
	TracePanels []string
}

// Panel is one time-series panel.
type Panel struct {
	// Title of the panel.
	Title string
	// Unit is Grafana's unit id ("reqps", "short", "percentunit").
	Unit string
	// Targets are the panel's queries.
	Targets []Target
}

// Target is one PromQL query of a panel.
type Target struct {
	// Expr is the query; $cell is the dashboard's cell variable.
	Expr string
	// Legend is Grafana's legend format ("{{cell}}").
	Legend string
}

// Dashboards returns the mixin's dashboards: one aggregate view over every
// cell and one per concern, each filterable by cell.
func Dashboards() []Dashboard {
	return []Dashboard{
		{UID: "cellgate-cells", Title: "Cellgate / Cells overview", Panels: []Panel{
			{"Requests by cell", "reqps", []Target{{`sum by (cell) (cell_route_code:cellgate_http_requests:rate5m{cell=~"$cell"})`, "{{cell}}"}}},
			{"Server errors (5xx) by cell", "reqps", []Target{{`sum by (cell) (cell_route_code:cellgate_http_requests:rate5m{cell=~"$cell", code="5xx"})`, "{{cell}}"}}},
			{"p99 request duration by cell", "s", []Target{{`histogram_quantile(0.99, sum by (cell, le) (rate(cellgate_http_request_duration_seconds_bucket{cell=~"$cell"}[5m])))`, "{{cell}}"}}},
			{"Server admission utilisation", "percentunit", []Target{{`cell:cellgate_server_admission_utilisation:max{cell=~"$cell"}`, "{{cell}}"}}},
			{"Databases up", "short", []Target{{`min by (cell, database) (cellgate_database_up{cell=~"$cell"})`, "{{cell}} {{database}}"}}},
			{"Cells up at the router", "short", []Target{{`max by (cell) (cellgate_router_cell_up{cell=~"$cell"})`, "{{cell}}"}}},
		}, TracePanels: []string{"p99 request duration by cell"}},
		{UID: "cellgate-tenants", Title: "Cellgate / Tenants and bulkheads", Panels: []Panel{
			{"Tenant bulkhead rejections", "reqps", []Target{{`cell_kind:cellgate_tenant_bulkhead_rejections:rate5m{cell=~"$cell"}`, "{{cell}} {{kind}}"}}},
			{"Server admission rejections", "reqps", []Target{{`cell:cellgate_server_admission_rejections:rate5m{cell=~"$cell"}`, "{{cell}}"}}},
			{"Server in-flight requests", "short", []Target{
				{`sum by (cell) (cellgate_server_in_flight_requests{cell=~"$cell"})`, "{{cell}} in flight"},
				{`sum by (cell) (cellgate_server_max_concurrent_requests{cell=~"$cell"})`, "{{cell}} limit"},
			}},
			{"Admission outcomes", "ops", []Target{{`sum by (cell, outcome) (rate(cellgate_admission_outcomes_total{cell=~"$cell"}[5m]))`, "{{cell}} {{outcome}}"}}},
			{"Admission accounts", "short", []Target{{`sum by (cell) (cellgate_admission_accounts{cell=~"$cell"})`, "{{cell}}"}}},
			{"Admission permits in flight", "short", []Target{{`sum by (cell) (cellgate_admission_in_flight_permits{cell=~"$cell"})`, "{{cell}}"}}},
		}},
		{UID: "cellgate-jobs", Title: "Cellgate / Jobs", Panels: []Panel{
			{"Queue depth by queue", "short", []Target{{`cell_queue:cellgate_jobs_queue_depth:max{cell=~"$cell"}`, "{{cell}} {{queue}}"}}},
			{"Busy workers by lane", "short", []Target{{`cell_lane:cellgate_jobs_lane_busy_workers:sum{cell=~"$cell"}`, "{{cell}} lane {{lane}}"}}},
			{"Jobs running", "short", []Target{{`sum by (cell) (cellgate_jobs_running{cell=~"$cell"})`, "{{cell}}"}}},
			{"Completed, retried and failed by kind", "ops", []Target{
				{`sum by (cell, kind) (rate(cellgate_jobs_completed_total{cell=~"$cell"}[5m]))`, "{{cell}} {{kind}} completed"},
				{`sum by (cell, kind) (rate(cellgate_jobs_retried_total{cell=~"$cell"}[5m]))`, "{{cell}} {{kind}} retried"},
				{`sum by (cell, kind) (rate(cellgate_jobs_failed_total{cell=~"$cell"}[5m]))`, "{{cell}} {{kind}} failed"},
			}},
			{"Job tables ready by database", "short", []Target{{`min by (cell, database) (cellgate_jobs_database_ready{cell=~"$cell"})`, "{{cell}} {{database}}"}}},
			{"Enqueue breaker", "short", []Target{
				{`max by (cell) (cellgate_jobs_breaker_state{cell=~"$cell"})`, "{{cell}} state"},
				{`sum by (cell) (rate(cellgate_jobs_breaker_rejections_total{cell=~"$cell"}[5m]))`, "{{cell}} rejections/s"},
			}},
			{"p99 job duration by kind", "s", []Target{{`histogram_quantile(0.99, sum by (cell, kind, le) (rate(cellgate_job_duration_seconds_bucket{cell=~"$cell"}[5m])))`, "{{cell}} {{kind}}"}}},
			{"p99 job wait by queue", "s", []Target{{`histogram_quantile(0.99, sum by (cell, queue, le) (rate(cellgate_job_wait_seconds_bucket{cell=~"$cell"}[5m])))`, "{{cell}} {{queue}}"}}},
		}, TracePanels: []string{"p99 job duration by kind", "p99 job wait by queue"}},
		{UID: "cellgate-router", Title: "Cellgate / Router", Panels: []Panel{
			{"Requests by cell and class", "reqps", []Target{{`sum by (cell, code_class) (rate(cellgate_router_requests_total{cell=~"$cell"}[5m]))`, "{{cell}} {{code_class}}"}}},
			{"Cell up", "short", []Target{{`min by (cell) (cellgate_router_cell_up{cell=~"$cell"})`, "{{cell}}"}}},
			{"In flight per cell", "short", []Target{{`sum by (cell) (cellgate_router_in_flight_requests{cell=~"$cell"})`, "{{cell}}"}}},
			{"Rejections and upstream errors", "reqps", []Target{
				{`sum by (cell, reason) (rate(cellgate_router_rejections_total{cell=~"$cell"}[5m]))`, "{{cell}} {{reason}}"},
				{`sum by (cell, kind) (rate(cellgate_router_upstream_errors_total{cell=~"$cell"}[5m]))`, "{{cell}} {{kind}}"},
			}},
			{"Ejections", "short", []Target{{`sum by (cell, cause) (increase(cellgate_router_cell_ejections_total{cell=~"$cell"}[5m]))`, "{{cell}} {{cause}}"}}},
			{"Slot map", "short", []Target{
				{`min by (pod) (cellgate_router_slotmap_current)`, "{{pod}} current"},
				{`sum by (result) (increase(cellgate_router_slotmap_reloads_total[5m]))`, "reloads {{result}}"},
				{`sum(rate(cellgate_router_no_cell_total[5m]))`, "no cell/s"},
			}},
		}},
	}
}

// grafana is the dashboard in Grafana's JSON model: a Prometheus data
// source variable, a cell variable (every cell the router knows) and the
// panels on a 24-column grid, two per row.
func (d Dashboard) grafana() map[string]any {
	ds := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	traced := map[string]bool{}
	for _, t := range d.TracePanels {
		traced[t] = true
	}
	panels := make([]any, len(d.Panels))
	for i, p := range d.Panels {
		targets := make([]any, len(p.Targets))
		for j, t := range p.Targets {
			target := map[string]any{
				"datasource":   ds,
				"expr":         t.Expr,
				"legendFormat": t.Legend,
				"refId":        string(rune('A' + j)),
			}
			if traced[p.Title] {
				target["exemplar"] = true
			}
			targets[j] = target
		}
		panel := map[string]any{
			"id":          i + 1,
			"type":        "timeseries",
			"title":       p.Title,
			"datasource":  ds,
			"gridPos":     map[string]any{"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8},
			"fieldConfig": map[string]any{"defaults": map[string]any{"unit": p.Unit}, "overrides": []any{}},
			"targets":     targets,
		}
		if traced[p.Title] {
			panel["links"] = []any{map[string]any{"title": "Traces of these cells in this time range", "url": traceLink, "targetBlank": true}}
		}
		panels[i] = panel
	}
	return map[string]any{
		"uid":           d.UID,
		"title":         d.Title,
		"tags":          []any{"cellgate"},
		"timezone":      "utc",
		"schemaVersion": 39,
		"editable":      false,
		"refresh":       "30s",
		"time":          map[string]any{"from": "now-6h", "to": "now"},
		"templating": map[string]any{"list": []any{
			map[string]any{
				"name":  "datasource",
				"type":  "datasource",
				"query": "prometheus",
			},
			map[string]any{
				"name":       "cell",
				"type":       "query",
				"datasource": ds,
				"query":      map[string]any{"query": "label_values(cellgate_router_cell_up, cell)", "refId": "cell"},
				"definition": "label_values(cellgate_router_cell_up, cell)",
				"includeAll": true,
				"multi":      true,
				"allValue":   ".*",
				"current":    map[string]any{"text": "All", "value": "$__all"},
				"refresh":    2,
			},
			map[string]any{
				"name":  "traces",
				"label": "trace backend",
				"type":  "datasource",
				"query": "tempo",
			},
		}},
		"panels": panels,
	}
}

// traceLink opens Grafana's Explore on the $traces data source with a
// TraceQL search for the dashboard's cells (the cellgate.cell span
// attribute) over the panel's time range. An exemplar's own link is the
// Prometheus data source's exemplarTraceIdDestinations (docs/observability.md).
const traceLink = `/explore?left={"datasource":"${traces}","queries":[{"refId":"A","queryType":"traceql","query":"{ span.cellgate.cell =~ \"${cell:regex}\" }"}],"range":{"from":"${__from}","to":"${__to}"}}`
