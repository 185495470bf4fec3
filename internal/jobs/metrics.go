package jobs

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unknownKind is the kind label of jobs whose kind has no registered worker,
// so a stray kind name cannot grow the label set.
const unknownKind = "unknown"

// metrics are the Client's collectors. None has a tenant label: tenants are
// unbounded, and per-tenant numbers would leak one tenant's activity into
// another's dashboards.
//
// The workers do not update running, laneBusy and the outcome counters per
// job: shared counters would cost every job a few atomic read-modify-writes
// on cache lines that bounce between cores. Each worker counts in its own
// memory instead (workerState), and a scrape folds those counts into the
// collectors first (see folder).
type metrics struct {
	running   prometheus.Gauge
	completed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	retried   *prometheus.CounterVec
	snoozed   *prometheus.CounterVec
	laneBusy  *prometheus.GaugeVec
	depth     *depthCollector

	// Periodic scheduling, by entry (jobs.periodic names: bounded).
	periodicEnqueued *prometheus.CounterVec
	periodicSkipped  *prometheus.CounterVec

	// folder is set by the Client before the collectors are registered;
	// nil when the metrics are used without workers.
	folder *folder
}

// kindMetrics are one kind's counters, resolved once.
type kindMetrics struct {
	completed, failed, retried, snoozed prometheus.Counter
}

func newMetrics(b Backend, logger *slog.Logger) *metrics {
	return &metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_jobs_running",
			Help: "Jobs this process claimed and has not yet reported an outcome for.",
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
		snoozed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_snoozed_total",
			Help: "Job attempts that snoozed (jobs.Snooze: run again later, not counted as an attempt), by kind.",
		}, []string{"kind"}),
		laneBusy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellgate_jobs_lane_busy_workers",
			Help: "Workers of each lane between a claim and the report of its outcome (one lane, \"0\", when lanes are off).",
		}, []string{"lane"}),
		periodicEnqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_periodic_enqueued_total",
			Help: "Runs of periodic jobs enqueued by this process's scheduler, by jobs.periodic entry.",
		}, []string{"entry"}),
		periodicSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_jobs_periodic_skipped_total",
			Help: "Periods of periodic jobs skipped because they were missed (catch_up), by jobs.periodic entry.",
		}, []string{"entry"}),
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
	if err := reg.Register(folding{m: m}); err != nil {
		return err
	}
	if err := reg.Register(m.periodicEnqueued); err != nil {
		return err
	}
	if err := reg.Register(m.periodicSkipped); err != nil {
		return err
	}
	return reg.Register(m.depth)
}

// folding collects the metrics the workers count into, after folding the
// workers' counts in once per scrape (one collector for all six, so a
// scrape folds once and sees them all from the same fold).
type folding struct{ m *metrics }

func (f folding) collectors() [6]prometheus.Collector {
	m := f.m
	return [6]prometheus.Collector{m.running, m.completed, m.failed, m.retried, m.snoozed, m.laneBusy}
}

func (f folding) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range f.collectors() {
		c.Describe(ch)
	}
}

func (f folding) Collect(ch chan<- prometheus.Metric) {
	if f.m.folder != nil {
		f.m.folder.fold()
	}
	for _, c := range f.collectors() {
		c.Collect(ch)
	}
}

// Outcomes a worker counts per kind.
const (
	outcomeCompleted = iota
	outcomeFailed
	outcomeRetried
	outcomeSnoozed
	numOutcomes
)

// kindCounts are one worker's outcome counts for one kind. Only that worker
// adds to them; the padding keeps two workers' counts off one cache line.
type kindCounts struct {
	n [numOutcomes]atomic.Uint64
	_ [64 - 8*numOutcomes]byte
}

// inc counts one outcome. A load and a store, not an atomic add: the worker
// is the only writer, so no update can be lost, and the store alone keeps
// fold's concurrent loads whole without a locked instruction per job.
func (c *kindCounts) inc(o int) { c.n[o].Store(c.n[o].Load() + 1) }

// folder moves what the workers counted into the collectors. Counters get
// what was counted since the last fold; the running and lane gauges are set
// from the workers' current jobs (a worker is busy from the claim until the
// outcome is recorded).
type folder struct {
	mu      sync.Mutex
	ws      []workerState
	lanes   []prometheus.Gauge    // by lane
	kinds   []kindMetrics         // by kind index
	added   [][numOutcomes]uint64 // by kind index: counts already added
	running prometheus.Gauge
	busy    []int // by lane, scratch
}

func newFolder(m *metrics, ws []workerState, lanes int, kinds []kindMetrics) *folder {
	f := &folder{
		ws:      ws,
		lanes:   make([]prometheus.Gauge, lanes),
		kinds:   kinds,
		added:   make([][numOutcomes]uint64, len(kinds)),
		running: m.running,
		busy:    make([]int, lanes),
	}
	for l := range f.lanes {
		f.lanes[l] = m.lane(l) // every lane has a series from the start
	}
	return f
}

// fold is safe for concurrent use (a registry collects in parallel).
func (f *folder) fold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, km := range f.kinds {
		var sum [numOutcomes]uint64
		for i := range f.ws {
			c := &f.ws[i].counts[k]
			for o := range sum {
				sum[o] += c.n[o].Load()
			}
		}
		for o, ctr := range [numOutcomes]prometheus.Counter{km.completed, km.failed, km.retried, km.snoozed} {
			if d := sum[o] - f.added[k][o]; d > 0 {
				ctr.Add(float64(d))
				f.added[k][o] = sum[o]
			}
		}
	}
	clear(f.busy)
	running := 0
	for i := range f.ws {
		if f.ws[i].current.Load() != 0 {
			running++
			f.busy[i%len(f.busy)]++
		}
	}
	f.running.Set(float64(running))
	for l, g := range f.lanes {
		g.Set(float64(f.busy[l]))
	}
}

func (m *metrics) forKind(name string) kindMetrics {
	return kindMetrics{
		completed: m.completed.WithLabelValues(name),
		failed:    m.failed.WithLabelValues(name),
		retried:   m.retried.WithLabelValues(name),
		snoozed:   m.snoozed.WithLabelValues(name),
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

// forPeriodic makes entry's periodic series exist from the start (at 0).
func (m *metrics) forPeriodic(entry string) {
	m.periodicEnqueued.WithLabelValues(entry)
	m.periodicSkipped.WithLabelValues(entry)
}

// scheduled is OpenParams.Scheduled: one scheduling of entry.
func (m *metrics) scheduled(entry string, enqueued, skipped int) {
	if enqueued > 0 {
		m.periodicEnqueued.WithLabelValues(entry).Add(float64(enqueued))
	}
	if skipped > 0 {
		m.periodicSkipped.WithLabelValues(entry).Add(float64(skipped))
	}
}
