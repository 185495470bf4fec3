package slotmove

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A move is a batch job, not a server: its figures go to a Prometheus
// textfile (node_exporter's textfile collector reads it) once the run
// ends, whatever the outcome, rather than to an HTTP endpoint nobody
// scrapes in time.

// MetricsRegistry returns a registry holding the cellgate_slotmove_*
// metrics of one run: its Report, whether it succeeded and when it ended.
// Labels are bounded: table (the moved tables) and step (FreezeStep
// names).
func MetricsRegistry(rep Report, ok bool, at time.Time) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	perTable := func(name, help string, values map[string]int64) {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"table"})
		for t, n := range values {
			c.WithLabelValues(t).Add(float64(n))
		}
		reg.MustRegister(c)
	}
	perTable("cellgate_slotmove_rows_copied_total", "Rows the initial copy wrote to the target, per table.", rep.Copied)
	perTable("cellgate_slotmove_rows_deleted_total", "Rows deleted at the source after the switch, per table.", rep.Deleted)
	perTable("cellgate_slotmove_rows_verified_total", "Rows that matched on both sides in the full verify, per table.", rep.Verified)
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	counter := func(name, help string, v int64) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		c.Add(float64(v))
		reg.MustRegister(c)
	}
	counter("cellgate_slotmove_changes_streamed_total", "Changes applied to the target from the replication streams.", rep.Streamed)
	counter("cellgate_slotmove_jobs_moved_total", "Waiting and scheduled jobs of the moved tenants moved to the target.", rep.JobsMoved)
	counter("cellgate_slotmove_tenant_rows_moved_total", "Rows of the control database's tenant table (plans) moved to the target.", rep.TenantsMoved)
	gauge("cellgate_slotmove_copy_duration_seconds", "How long the initial copy took.", rep.CopyTime.Seconds())
	gauge("cellgate_slotmove_peak_lag_bytes", "Largest distance seen between a source's WAL position and what had been applied.", float64(rep.PeakLagBytes))
	gauge("cellgate_slotmove_peak_lag_seconds", "Longest time a change committed at a source took to be applied at the target.", rep.PeakLag.Seconds())
	gauge("cellgate_slotmove_freeze_seconds", "Time from writing the frozen map to every router confirming the switched one.", rep.Freeze.Seconds())
	steps := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cellgate_slotmove_freeze_step_seconds",
		Help: "Time of each step inside the freeze (map, routers, fence, catch_up, verify, state_identity, switch, routers_switched)."}, []string{"step"})
	for _, s := range rep.FreezeSteps {
		steps.WithLabelValues(s.Name).Add(s.Took.Seconds())
	}
	reg.MustRegister(steps)
	success := 0.0
	if ok {
		success = 1
	}
	gauge("cellgate_slotmove_last_run_success", "1 when the run finished the move, 0 when it stopped with an error.", success)
	gauge("cellgate_slotmove_last_run_timestamp_seconds", "When the run ended (Unix time).", float64(at.UnixNano())/1e9)
	return reg
}

// WriteMetricsFile writes MetricsRegistry's metrics to path in the text
// format, atomically (a temporary file renamed over it).
func WriteMetricsFile(path string, rep Report, ok bool, at time.Time) error {
	return prometheus.WriteToTextfile(path, MetricsRegistry(rep, ok, at))
}
