// Package jobstest holds the conformance suite every jobs.Backend's tests run,
// and test doubles for the job runtime (FakeClock).
//
// A backend's test calls RunConformance with a Harness whose NewBackend
// returns a fresh, empty backend for each subtest. The suite drives the
// backend only through a jobs.Client, the way the app does, and assumes no
// more than a database would give: it waits for outcomes by polling with
// generous deadlines, and it asserts that something did NOT happen only after
// Harness.Settle.
//
// Concurrency: RunConformance runs its subtests in parallel; NewBackend must
// be safe for concurrent use. FakeClock is safe for concurrent use.
package jobstest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellgate/cellgate/internal/jobs"
)

// Harness describes the backend under test.
type Harness struct {
	// NewBackend returns a fresh, empty, unopened backend; it registers the
	// cleanup of whatever it created (a database, say) with t. Required.
	NewBackend func(t testing.TB) jobs.Backend
	// Settle is how long the suite watches before asserting that something
	// did not happen (a third job of a tenant with two slots, say). Set it
	// above the backend's poll interval. 0 means 100ms.
	Settle time.Duration
	// Wait bounds how long the suite waits for something that must happen.
	// 0 means 15s.
	Wait time.Duration
	// NewLimitedBackend returns a fresh backend, as NewBackend, that takes
	// per-tenant caps and weights from l. Optional: without it the caps,
	// weights and live-change cases do not run.
	NewLimitedBackend func(t testing.TB, l jobs.TenantLimits) jobs.Backend
	// NewSharedBackends returns two fresh backends over one store, as two
	// processes claiming from one jobs database, both taking their limits
	// from l. Optional: without it the cross-process cap case does not run.
	NewSharedBackends func(t testing.TB, l jobs.TenantLimits) (jobs.Backend, jobs.Backend)
	// NoFairOrder says the backend's claims follow enqueue order (the
	// PostgreSQL backend's FIFO claims): weights and priorities are not
	// part of its contract, and their cases do not run.
	NoFairOrder bool
}

func (h Harness) withDefaults() Harness {
	h.Settle = cmp.Or(h.Settle, 100*time.Millisecond)
	h.Wait = cmp.Or(h.Wait, 15*time.Second)
	return h
}

// RunConformance runs the backend conformance suite: enqueue, work, retry
// (backoff, panics, permanent errors, timeouts), uniqueness, bulk enqueue, per-kind
// concurrency and shutdown for every backend; tenant fairness, slots and
// lanes for backends whose Capabilities report TenantIsolation; pausing and
// resuming a queue for backends that implement jobs.QueuePauser.
func RunConformance(t *testing.T, h Harness) {
	if h.NewBackend == nil {
		t.Fatal("jobstest: Harness.NewBackend is nil")
	}
	h = h.withDefaults()
	probe := h.NewBackend(t)
	caps := probe.Capabilities()
	_, pauses := probe.(jobs.QueuePauser)

	tests := []suiteCase{
		{"Enqueue", testEnqueue},
		{"Work", testWork},
		{"Retry", testRetry},
		{"Uniqueness", testUniqueness},
		{"EnqueueMany", testEnqueueMany},
		{"KindConcurrency", testKindConcurrency},
		{"Shutdown", testShutdown},
		{"Middleware", testMiddleware},
		{"InsertMiddleware", testInsertMiddleware},
		{"Snooze", testSnooze},
	}
	if caps.TenantIsolation {
		tests = append(tests,
			suiteCase{"TenantFairness", testFairness},
			suiteCase{"EnqueueManyFair", testEnqueueManyFair},
			suiteCase{"TenantSlots", testSlots},
			suiteCase{"TenantLanes", testLanes})
	} else {
		t.Log("jobstest: backend reports no TenantIsolation; fairness, slots and lanes are not part of its contract")
	}
	if _, ok := probe.(jobs.Canceller); ok {
		tests = append(tests, suiteCase{"Cancel", testCancel})
	} else {
		t.Log("jobstest: backend is no jobs.Canceller; cancelling jobs is not part of its contract")
	}
	if !h.NoFairOrder {
		tests = append(tests, suiteCase{"Priority", testPriority})
	} else {
		t.Log("jobstest: the backend's claims follow enqueue order (Harness.NoFairOrder): no weights or priorities")
	}
	if h.NewLimitedBackend != nil {
		tests = append(tests, suiteCase{"TenantCaps", testTenantCaps}, suiteCase{"TenantCapChange", testTenantCapChange})
		if !h.NoFairOrder {
			tests = append(tests, suiteCase{"TenantWeights", testTenantWeights}, suiteCase{"PriorityDoesNotStarve", testPriorityNoStarve})
		}
	} else {
		t.Log("jobstest: no Harness.NewLimitedBackend; per-tenant caps and weights are not tested")
	}
	if h.NewSharedBackends != nil {
		tests = append(tests, suiteCase{"TenantCapAcrossProcesses", testTenantCapShared})
	}
	if caps.Periodic {
		tests = append(tests, suiteCase{"Periodic", testPeriodic})
	}
	if _, ok := probe.(jobs.Canceller); ok && caps.CancelRunning {
		tests = append(tests, suiteCase{"CancelRunning", testCancelRunning})
	}
	if pauses {
		tests = append(tests, suiteCase{"QueuePause", testQueuePause})
	} else {
		t.Log("jobstest: backend is no jobs.QueuePauser; pausing queues is not part of its contract")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// suiteCase is one subtest of the conformance suite.
type suiteCase struct {
	name string
	fn   func(*testing.T, Harness)
}

// env is one Client on a fresh backend, stopped at cleanup.
type env struct {
	t       *testing.T
	h       Harness
	c       *jobs.Client
	b       jobs.Backend // c's
	reg     *prometheus.Registry
	release chan struct{} // closed at cleanup: unblocks blocking handlers
	once    sync.Once
}

func newEnv(t *testing.T, h Harness, cfg jobs.Config, w *jobs.Workers) *env {
	t.Helper()
	return newEnvOpts(t, h, cfg, w, jobs.Options{})
}

// newEnvOpts is newEnv with o's middleware (its logger and registry are
// the env's own).
func newEnvOpts(t *testing.T, h Harness, cfg jobs.Config, w *jobs.Workers, o jobs.Options) *env {
	t.Helper()
	return newEnvOn(t, h, h.NewBackend(t), cfg, w, o)
}

// newEnvOn is newEnvOpts on the backend b.
func newEnvOn(t *testing.T, h Harness, b jobs.Backend, cfg jobs.Config, w *jobs.Workers, o jobs.Options) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	// Abandoned handlers may log after the test ends, so logs go nowhere
	// rather than to t.Log.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Logger, o.Registry = logger, reg
	c, err := jobs.NewClient(context.Background(), cfg, b, w, o)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	e := &env{t: t, h: h, c: c, b: b, reg: reg, release: make(chan struct{})}
	t.Cleanup(func() {
		e.unblock()
		ctx, cancel := context.WithTimeout(context.Background(), h.Wait)
		defer cancel()
		if _, err := c.Stop(ctx); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return e
}

func (e *env) unblock() { e.once.Do(func() { close(e.release) }) }

func (e *env) start() {
	e.t.Helper()
	if err := e.c.Start(context.Background()); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
}

// block waits until the test releases handlers or ctx ends.
func (e *env) block(ctx context.Context) {
	select {
	case <-e.release:
	case <-ctx.Done():
	}
}

func (e *env) enqueue(ctx context.Context, args jobs.Args, opts ...jobs.EnqueueOption) jobs.EnqueueResult {
	e.t.Helper()
	r, err := e.c.Enqueue(ctx, args, opts...)
	if err != nil {
		e.t.Fatalf("Enqueue(%+v): %v", args, err)
	}
	if r.ID <= 0 {
		e.t.Fatalf("Enqueue(%+v) returned id %d, want > 0", args, r.ID)
	}
	return r
}

// eventually polls cond until it holds or h.Wait passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	e.eventuallySaying(what, cond, nil)
}

// eventuallySaying is eventually whose failure also says what state
// returns after the last poll (a metric's value): enough to tell a stall
// from an overshoot. state may be nil.
func (e *env) eventuallySaying(what string, cond func() bool, state func() string) {
	e.t.Helper()
	deadline := time.Now().Add(e.h.Wait)
	for !cond() {
		if time.Now().After(deadline) {
			if state != nil {
				e.t.Fatalf("timed out after %s waiting for %s; last %s", e.h.Wait, what, state())
			}
			e.t.Fatalf("timed out after %s waiting for %s", e.h.Wait, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// never watches cond for h.Settle and fails if it ever holds.
func (e *env) never(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(e.h.Settle)
	for time.Now().Before(deadline) {
		if cond() {
			e.t.Fatalf("%s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if cond() {
		e.t.Fatalf("%s", what)
	}
}

// metric returns the value of the series of name whose labels include the
// given name/value pairs, and whether there is one.
func (e *env) metric(name string, labels ...string) (float64, bool) {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue() == value
		}
	}
	return false
}

// metricIs waits until the series has value v.
func (e *env) metricIs(v float64, name string, labels ...string) {
	e.t.Helper()
	var got float64
	var ok bool
	e.eventuallySaying(fmt.Sprintf("%s%v == %v", name, labels, v), func() bool {
		got, ok = e.metric(name, labels...)
		return ok && got == v
	}, func() string {
		if !ok {
			return "no such series"
		}
		return fmt.Sprint(got)
	})
}

// lint fails on any metric the Prometheus linter flags.
func (e *env) lint() {
	e.t.Helper()
	problems, err := testutil.GatherAndLint(e.reg)
	if err != nil {
		e.t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		e.t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}

// tracker records starts and ends of jobs per group (tenant, or "none").
type tracker struct {
	mu      sync.Mutex
	running map[string]int
	maxRun  map[string]int
	order   []string
	runs    map[jobs.JobID]int
	ended   map[jobs.JobID]bool
}

func newTracker() *tracker {
	return &tracker{running: map[string]int{}, maxRun: map[string]int{}, runs: map[jobs.JobID]int{}, ended: map[jobs.JobID]bool{}}
}

func group(tenantID string) string {
	if tenantID == "" {
		return "none"
	}
	return tenantID
}

// workers registers a basicArgs handler that records each job's start and
// end under its tenant's group, running during (nil: nothing) in between.
func (tr *tracker) workers(during func(ctx context.Context, j *jobs.Job[basicArgs])) *jobs.Workers {
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		g := group(j.Tenant)
		tr.begin(j.ID, g)
		defer tr.end(j.ID, g)
		if during != nil {
			during(ctx, j)
		}
		return nil
	})
	return w
}

func (tr *tracker) begin(id jobs.JobID, g string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.running[g]++
	tr.maxRun[g] = max(tr.maxRun[g], tr.running[g])
	tr.order = append(tr.order, g)
	tr.runs[id]++
}

func (tr *tracker) end(id jobs.JobID, g string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.running[g]--
	tr.ended[id] = true
}

func (tr *tracker) runningOf(g string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.running[g]
}

func (tr *tracker) maxOf(g string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.maxRun[g]
}

func (tr *tracker) endedCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.ended)
}

func (tr *tracker) hasEnded(id jobs.JobID) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ended[id]
}

func (tr *tracker) startOrder() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.order...)
}
