package jobs

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unknownKind is the kind label of jobs whose kind has no registered worker,
// so a stray kind name cannot grow the label set.
const unknownKind = "unknown"

// metrics are the Client's collectors. None has a tenant label: tenants are
// unbounded, and per-tenant numbers would leak one tenant's activity into
// another's dashboards.
type metrics struct {
	running   prometheus.Gauge
	completed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	retried   *prometheus.CounterVec
	laneBusy  *prometheus.GaugeVec
	depth     *depthCollector
}

// kindMetrics are one kind's counters, resolved once.
type kindMetrics struct {
	completed, failed, retried prometheus.Counter
}

func newMetrics(b Backend, logger *slog.Logger) *metrics {
	return &metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_jobs_running",
			Help: "Jobs this process is running now.",
		}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_completed_total",
			Help: "Job attempts that succeeded, by kind.",
		}, []string{"kind"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_failed_total",
			Help: "Jobs that failed for good (attempts exhausted or a permanent error), by kind.",
		}, []string{"kind"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_retried_total",
			Help: "Failed job attempts that were scheduled for a retry, by kind.",
		}, []string{"kind"}),
		laneBusy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellgate_jobs_lane_busy_workers",
			Help: "Workers of each lane that are running a job (one lane, \"0\", when lanes are off).",
		}, []string{"lane"}),
		depth: &depthCollector{
			backend: b,
			logger:  logger,
			desc: prometheus.NewDesc("cellgate_jobs_queue_depth",
				"Jobs waiting in each queue: available, scheduled for later or a retry, or held by a kind's concurrency cap.",
				[]string{"queue"}, nil),
		},
	}
}

func (m *metrics) register(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{m.running, m.completed, m.failed, m.retried, m.laneBusy, m.depth} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) forKind(name string) kindMetrics {
	return kindMetrics{
		completed: m.completed.WithLabelValues(name),
		failed:    m.failed.WithLabelValues(name),
		retried:   m.retried.WithLabelValues(name),
	}
}

func (m *metrics) lane(i int) prometheus.Gauge {
	return m.laneBusy.WithLabelValues(strconv.Itoa(i))
}

// depthCollector asks the backend for queue depths at scrape time, so a
// PostgreSQL backend reports what the table holds, not what this process saw.
type depthCollector struct {
	backend Backend
	logger  *slog.Logger
	desc    *prometheus.Desc
}

// depthTimeout bounds the Stats call of one scrape.
const depthTimeout = 5 * time.Second

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), depthTimeout)
	defer cancel()
	stats, err := d.backend.Stats(ctx)
	if err != nil {
		// A failed scrape of one gauge should not fail the whole /metrics.
		d.logger.Warn("jobs: queue depth unavailable", "err", err)
		return
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(s.Waiting), s.Queue)
	}
}
