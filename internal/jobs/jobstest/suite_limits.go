package jobstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

// Limits is a jobs.TenantLimits whose limits a test changes while the
// backend runs: per-tenant caps and weights, no cap and weight 1 for the
// others.
type Limits struct {
	mu sync.RWMutex
	m  map[string][2]int
}

// NewLimits returns Limits without any tenant's limits set.
func NewLimits() *Limits { return &Limits{m: map[string][2]int{}} }

// Set sets tenant's cap on running jobs (0 = none) and weight.
func (l *Limits) Set(tenantID string, maxRunning, weight int) {
	l.mu.Lock()
	l.m[tenantID] = [2]int{maxRunning, weight}
	l.mu.Unlock()
}

// JobLimits implements jobs.TenantLimits.
func (l *Limits) JobLimits(tenantID string) (maxRunning, weight int) {
	l.mu.RLock()
	v, ok := l.m[tenantID]
	l.mu.RUnlock()
	if !ok {
		return 0, 1
	}
	return v[0], v[1]
}

// prioLowArgs is a kind whose spec gives its jobs priority 3.
type prioLowArgs struct {
	N int `json:"n"`
}

func (prioLowArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "jobstest_prio_low", Priority: 3}
}

// testTenantCaps: a tenant capped at 2 runs 2 jobs while workers are idle,
// a tenant without a cap and jobs without a tenant use the rest.
func testTenantCaps(t *testing.T, h Harness) {
	lim := NewLimits()
	lim.Set("A", 2, 1)
	tr := newTracker()
	var e *env
	w := tr.workers(func(ctx context.Context, _ *jobs.Job[basicArgs]) { e.block(ctx) })
	e = newEnvOn(t, h, h.NewLimitedBackend(t, lim), jobs.Config{Workers: 8}, w, jobs.Options{})
	bg := context.Background()
	// A's jobs first: its backlog must be stepped over, not wait in front.
	for _, c := range []struct {
		ctx context.Context
		n   int
	}{{tenant.With(bg, "A"), 6}, {tenant.With(bg, "B"), 3}, {bg, 2}} {
		for i := range c.n {
			e.enqueue(c.ctx, basicArgs{Key: "caps", N: i})
		}
	}
	e.start()
	e.eventually("A 2, B 3 and 2 jobs without a tenant running", func() bool {
		return tr.runningOf("A") == 2 && tr.runningOf("B") == 3 && tr.runningOf("none") == 2
	})
	e.never("A ran more than its cap of 2 with idle workers", func() bool { return tr.runningOf("A") > 2 })
	e.unblock()
	e.eventually("all 11 jobs done", func() bool { return tr.endedCount() == 11 })
	if a := tr.maxOf("A"); a != 2 {
		t.Fatalf("A's peak running = %d, want its cap, 2", a)
	}
}

// testTenantCapChange: a raised cap applies while the backend runs.
func testTenantCapChange(t *testing.T, h Harness) {
	lim := NewLimits()
	lim.Set("A", 1, 1)
	tr := newTracker()
	w := tr.workers(func(context.Context, *jobs.Job[basicArgs]) { time.Sleep(20 * time.Millisecond) })
	e := newEnvOn(t, h, h.NewLimitedBackend(t, lim), jobs.Config{Workers: 4}, w, jobs.Options{})
	ctx := tenant.With(context.Background(), "A")
	const n = 400
	for i := range n {
		e.enqueue(ctx, basicArgs{Key: "change", N: i})
	}
	e.start()
	e.eventually("5 of A's jobs done", func() bool { return tr.endedCount() >= 5 })
	if m := tr.maxOf("A"); m != 1 {
		t.Fatalf("A's peak running under a cap of 1 = %d", m)
	}
	lim.Set("A", 3, 1)
	e.eventually("A running 3 jobs after its cap was raised to 3", func() bool { return tr.runningOf("A") == 3 })
	e.never("A ran more than its new cap of 3", func() bool { return tr.runningOf("A") > 3 })
}

// testTenantWeights: with both backlogged, a tenant of weight 4 gets four
// claims for each claim of a tenant of weight 1.
func testTenantWeights(t *testing.T, h Harness) {
	lim := NewLimits()
	lim.Set("A", 0, 4)
	lim.Set("B", 0, 1)
	tr := newTracker()
	w := tr.workers(nil)
	// One worker: the start order is the claim order.
	e := newEnvOn(t, h, h.NewLimitedBackend(t, lim), jobs.Config{Workers: 1}, w, jobs.Options{})
	bg := context.Background()
	for i := range 100 {
		e.enqueue(tenant.With(bg, "A"), basicArgs{Key: "A", N: i})
		e.enqueue(tenant.With(bg, "B"), basicArgs{Key: "B", N: i})
	}
	e.start()
	var order []string
	e.eventually("50 jobs started", func() bool { order = tr.startOrder(); return len(order) >= 50 })
	count := map[string]int{}
	for _, g := range order[:50] {
		count[g]++
	}
	if count["A"] < 38 || count["A"] > 42 {
		t.Fatalf("first 50 starts = %v, want A 40 ± 2 and B 10 ∓ 2 (weights 4 and 1)", count)
	}
}

// testPriority: priority orders one tenant's waiting jobs, the kind's
// spec priority as well as WithPriority's, ties in enqueue order.
func testPriority(t *testing.T, h Harness) {
	var mu sync.Mutex
	var order []string
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		mu.Lock()
		order = append(order, j.Args.Key)
		mu.Unlock()
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[prioLowArgs]) error {
		mu.Lock()
		order = append(order, "kind3")
		mu.Unlock()
		return nil
	})
	e := newEnv(t, h, jobs.Config{Workers: 1}, w)
	ctx := tenant.With(context.Background(), "A")
	for i := range 4 {
		e.enqueue(ctx, basicArgs{Key: "p4", N: i}, jobs.WithPriority(4))
		e.enqueue(ctx, prioLowArgs{N: i})
		e.enqueue(ctx, basicArgs{Key: "p2", N: i}, jobs.WithPriority(2))
	}
	for i := range 4 {
		e.enqueue(ctx, basicArgs{Key: "p1", N: i})
	}
	if _, err := e.c.Enqueue(ctx, basicArgs{Key: "bad"}, jobs.WithPriority(5)); err == nil {
		t.Fatal("Enqueue with WithPriority(5) succeeded, want an error naming the priority")
	}
	e.start()
	e.eventually("16 jobs run", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 16 })
	want := []string{"p1", "p1", "p1", "p1", "p2", "p2", "p2", "p2", "kind3", "kind3", "kind3", "kind3", "p4", "p4", "p4", "p4"}
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("run order = %v, want %v", order, want)
		}
	}
}

// testPriorityNoStarve: one tenant's high-priority backlog does not take
// another tenant's turns.
func testPriorityNoStarve(t *testing.T, h Harness) {
	tr := newTracker()
	w := tr.workers(nil)
	e := newEnvOn(t, h, h.NewLimitedBackend(t, NewLimits()), jobs.Config{Workers: 1}, w, jobs.Options{})
	bg := context.Background()
	for i := range 50 {
		e.enqueue(tenant.With(bg, "B"), basicArgs{Key: "B", N: i}, jobs.WithPriority(4))
	}
	for i := range 50 {
		e.enqueue(tenant.With(bg, "A"), basicArgs{Key: "A", N: i}, jobs.WithPriority(1))
	}
	e.start()
	var order []string
	e.eventually("20 jobs started", func() bool { order = tr.startOrder(); return len(order) >= 20 })
	count := map[string]int{}
	for _, g := range order[:20] {
		count[g]++
	}
	if count["A"] < 9 || count["B"] < 9 {
		t.Fatalf("first 20 starts = %v, want about 10 each: A's priority-1 jobs must not take B's turns", count)
	}
}

// testTenantCapShared: a cap holds across two processes claiming from one
// store, counted inside the handlers, while another tenant's jobs flow.
func testTenantCapShared(t *testing.T, h Harness) {
	lim := NewLimits()
	lim.Set("A", 2, 1)
	b1, b2 := h.NewSharedBackends(t, lim)
	tr := newTracker()
	work := func(context.Context, *jobs.Job[basicArgs]) { time.Sleep(10 * time.Millisecond) }
	w1, w2 := tr.workers(work), tr.workers(work)
	e1 := newEnvOn(t, h, b1, jobs.Config{Workers: 4}, w1, jobs.Options{})
	e2 := newEnvOn(t, h, b2, jobs.Config{Workers: 4}, w2, jobs.Options{})
	bg := context.Background()
	const nA, nB = 60, 60
	for i := range nA {
		e1.enqueue(tenant.With(bg, "A"), basicArgs{Key: "A", N: i})
	}
	for i := range nB {
		e2.enqueue(tenant.With(bg, "B"), basicArgs{Key: "B", N: i})
	}
	e1.start()
	e2.start()
	e1.eventually("all jobs done", func() bool { return tr.endedCount() == nA+nB })
	if a := tr.maxOf("A"); a != 2 {
		t.Fatalf("A's peak running across both processes = %d, want its cap, 2", a)
	}
	if b := tr.maxOf("B"); b < 3 {
		t.Fatalf("B's peak running = %d; want more than A's cap (B is not capped)", b)
	}
}
