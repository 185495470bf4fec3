package local

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/jobstest"
	"github.com/cellgate/cellgate/internal/shards"
)

func open(t testing.TB, p jobs.OpenParams) *Backend {
	t.Helper()
	b := New()
	if p.Clock == nil {
		p.Clock = jobstest.NewFakeClock(time.Unix(1_700_000_000, 0))
	}
	if err := b.Open(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func insert(t testing.TB, b *Backend, p jobs.InsertParams) jobs.JobID {
	t.Helper()
	if p.Kind == "" {
		p.Kind = "k"
	}
	if p.Queue == "" {
		p.Queue = "default"
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	r, err := b.Insert(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// claimNow claims with a short deadline and reports nil when nothing is
// available (the deadline passing is the only way to observe "nothing").
func claimNow(t testing.TB, b *Backend, worker int) *jobs.JobRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	row, err := b.Claim(ctx, worker)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func TestRetryWaitsForItsDelay(t *testing.T) {
	clock := jobstest.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := open(t, jobs.OpenParams{Workers: 1, Clock: clock})
	id := insert(t, b, jobs.InsertParams{})
	row := claimNow(t, b, 0)
	if row == nil || row.ID != id || row.Attempt != 1 {
		t.Fatalf("claim = %+v, want job %d attempt 1", row, id)
	}
	if err := b.Retry(context.Background(), row, 10*time.Second, "boom"); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Stats(context.Background()); st[0].Waiting != 1 || st[0].Running != 0 {
		t.Fatalf("stats while scheduled = %+v", st)
	}
	if r := claimNow(t, b, 0); r != nil {
		t.Fatalf("claimed %d before its retry delay", r.ID)
	}
	clock.Advance(9 * time.Second)
	if r := claimNow(t, b, 0); r != nil {
		t.Fatalf("claimed %d 1s before its retry delay", r.ID)
	}
	clock.Advance(time.Second)
	row = claimNow(t, b, 0)
	if row == nil || row.ID != id || row.Attempt != 2 {
		t.Fatalf("claim after the delay = %+v, want job %d attempt 2", row, id)
	}
	if err := b.Complete(context.Background(), row); err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(context.Background(), row); err == nil {
		t.Error("second Complete of one attempt succeeded")
	}
}

func TestRunAtOrdersByTime(t *testing.T) {
	clock := jobstest.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := open(t, jobs.OpenParams{Workers: 1, Clock: clock})
	now := clock.Now()
	late := insert(t, b, jobs.InsertParams{RunAt: now.Add(2 * time.Minute)})
	early := insert(t, b, jobs.InsertParams{RunAt: now.Add(time.Minute)})
	if r := claimNow(t, b, 0); r != nil {
		t.Fatalf("claimed %d early", r.ID)
	}
	clock.Advance(time.Minute)
	if r := claimNow(t, b, 0); r == nil || r.ID != early {
		t.Fatalf("claim = %+v, want %d", r, early)
	}
	if r := claimNow(t, b, 0); r != nil {
		t.Fatalf("claimed %d early", r.ID)
	}
	clock.Advance(time.Hour)
	if r := claimNow(t, b, 0); r == nil || r.ID != late {
		t.Fatalf("claim = %+v, want %d", r, late)
	}
	if clock.Pending() != 0 {
		t.Errorf("%d timers left armed with nothing scheduled", clock.Pending())
	}
}

func TestMisuse(t *testing.T) {
	ctx := context.Background()
	if _, err := New().Insert(ctx, jobs.InsertParams{Kind: "k"}); err == nil {
		t.Error("Insert before Open succeeded")
	}
	b := open(t, jobs.OpenParams{Workers: 2})
	if err := b.Open(ctx, jobs.OpenParams{Workers: 2}); err == nil {
		t.Error("second Open succeeded")
	}
	if _, err := b.Claim(ctx, 2); err == nil {
		t.Error("Claim by worker 2 of 2 succeeded")
	}
	if err := b.Complete(ctx, &jobs.JobRow{ID: 1}); err == nil {
		t.Error("Complete of a row not from this backend succeeded")
	}
	if err := New().Open(ctx, jobs.OpenParams{Workers: 2, Tenants: jobs.TenantConfig{Lanes: 4, LanesPerTenant: 2}}); err == nil {
		t.Error("Open with more lanes than workers succeeded")
	}
	if _, err := b.InsertTx(ctx, shards.Tx{}, jobs.InsertParams{Kind: "k"}); !errors.Is(err, jobs.ErrNoTxEnqueue) {
		t.Errorf("InsertTx = %v, want ErrNoTxEnqueue", err)
	}
	if _, err := b.InsertManyTx(ctx, shards.Tx{}, []jobs.InsertParams{{Kind: "k"}}); !errors.Is(err, jobs.ErrNoTxEnqueue) {
		t.Errorf("InsertManyTx = %v, want ErrNoTxEnqueue", err)
	}
	insert(t, b, jobs.InsertParams{})
	row := claimNow(t, b, 0)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(ctx, row); !errors.Is(err, jobs.ErrClosed) {
		t.Errorf("Complete after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Insert(ctx, jobs.InsertParams{Kind: "k"}); !errors.Is(err, jobs.ErrClosed) {
		t.Errorf("Insert after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Claim(ctx, 0); !errors.Is(err, jobs.ErrClosed) {
		t.Errorf("Claim after Close = %v, want ErrClosed", err)
	}
}

// TestCloseReleasesParkedClaim: a worker parked in Claim returns at Close.
func TestCloseReleasesParkedClaim(t *testing.T) {
	b := open(t, jobs.OpenParams{Workers: 1})
	errc := make(chan error)
	go func() {
		_, err := b.Claim(context.Background(), 0)
		errc <- err
	}()
	for b.idleWorkerCount.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, jobs.ErrClosed) {
			t.Fatalf("parked Claim returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked Claim did not return at Close")
	}
}

// stepsPerClaim enqueues perTenant jobs for each of tenants tenants, claims
// and completes all of them, and returns the ring heads inspected per claim.
// With capped, every other job is of a kind with concurrency 1 whose one
// slot is held by worker 1 until the free jobs are done, so worker 0 parks
// each capped job it meets once, then they run one by one as the slot frees.
func stepsPerClaim(t *testing.T, p jobs.OpenParams, tenants, perTenant int, capped bool) float64 {
	if capped {
		p.Kinds = []jobs.KindSpec{{Name: "capped", Queue: "default", Concurrency: 1}}
	}
	b := open(t, p)
	ctx := context.Background()
	var held *jobs.JobRow
	if capped {
		insert(t, b, jobs.InsertParams{Kind: "capped"})
		var err error
		if held, err = b.Claim(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	free, parked := 0, 0
	for i := range perTenant {
		for n := range tenants {
			kind := "free"
			if capped && (i+n)%2 == 0 {
				kind = "capped"
				parked++
			} else {
				free++
			}
			insert(t, b, jobs.InsertParams{Kind: kind, Tenant: fmt.Sprintf("tenant-%d", n)})
		}
	}
	b.mu.Lock()
	start := b.headsVisited
	b.mu.Unlock()
	run := func(n int) {
		for range n {
			row, err := b.Claim(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if capped && row.Kind == "capped" && held != nil {
				t.Fatal("a second capped job ran while the cap was held")
			}
			if err := b.Complete(ctx, row); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(free)
	if held != nil {
		if err := b.Complete(ctx, held); err != nil {
			t.Fatal(err)
		}
		held = nil
	}
	run(parked)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drain() // the last Complete is still on the finished stack
	if st := b.queues[0]; st.waiting != 0 || st.running != 0 {
		t.Fatalf("after draining: waiting %d running %d", st.waiting, st.running)
	}
	return float64(b.headsVisited-start) / float64(free+parked)
}

// TestDequeueCostIsConstant: the work per claim does not grow with the
// number of tenants or the backlog. It counts ring heads inspected (each one
// O(1)), a deterministic stand-in for time.
func TestDequeueCostIsConstant(t *testing.T) {
	iso := jobs.TenantConfig{MaxConcurrent: 1, Lanes: 2, LanesPerTenant: 2}
	for _, tc := range []struct {
		name   string
		p      jobs.OpenParams
		capped bool
	}{
		{"fifo", jobs.OpenParams{Workers: 2}, false},
		{"fair", jobs.OpenParams{Workers: 2, Tenants: iso}, false},
		{"fair+kind-cap", jobs.OpenParams{Workers: 2, Tenants: iso}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			small := stepsPerClaim(t, tc.p, 4, 4, tc.capped)
			wide := stepsPerClaim(t, tc.p, 2000, 4, tc.capped)
			deep := stepsPerClaim(t, tc.p, 4, 2000, tc.capped)
			t.Logf("ring heads per claim: 4 tenants × 4 jobs %.2f, 2,000 × 4 %.2f, 4 × 2,000 %.2f", small, wide, deep)
			limit := 1.0 // one head per claim
			if tc.capped {
				limit = 1.5 // plus one per parked job: half of them
			}
			for _, s := range []float64{small, wide, deep} {
				if s > limit {
					t.Errorf("%.2f ring heads per claim, want at most %.1f whatever the tenants and backlog", s, limit)
				}
			}
		})
	}
}

func TestIdleTenantsAreBounded(t *testing.T) {
	b := open(t, jobs.OpenParams{Workers: 1, Tenants: jobs.TenantConfig{MaxConcurrent: 1}})
	ctx := context.Background()
	n := maxIdleTenants + 100
	for i := range n {
		insert(t, b, jobs.InsertParams{Tenant: fmt.Sprintf("t%d", i)})
	}
	for range n {
		row, err := b.Claim(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Complete(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Stats(ctx); err != nil { // applies the last completions
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.tenants) != maxIdleTenants || b.idleTenants != maxIdleTenants {
		t.Fatalf("%d tenants kept (%d idle), want %d", len(b.tenants), b.idleTenants, maxIdleTenants)
	}
	if b.tenants["t0"] != nil || b.tenants[fmt.Sprintf("t%d", n-1)] == nil {
		t.Fatal("eviction is not oldest-idle first")
	}
}

// BenchmarkBackendCycle is one insert, claim and complete on the backend
// alone (no Client, one goroutine) with a standing backlog of 10 jobs per
// tenant, for 10 and for 100,000 tenants. The steps per claim are the same
// (TestDequeueCostIsConstant); what the larger case adds is cache misses, its
// working set being a million jobs.
func BenchmarkBackendCycle(b *testing.B) {
	for _, tenants := range []int{10, 100_000} {
		for _, mode := range []struct {
			name string
			t    jobs.TenantConfig
		}{{"fifo", jobs.TenantConfig{}}, {"fair", jobs.TenantConfig{MaxConcurrent: 2, Lanes: 4, LanesPerTenant: 2}}} {
			b.Run(fmt.Sprintf("%s/tenants=%d", mode.name, tenants), func(b *testing.B) {
				be := open(b, jobs.OpenParams{Workers: 4, Tenants: mode.t, Clock: jobs.SystemClock{}})
				ids := make([]string, tenants)
				for i := range ids {
					ids[i] = fmt.Sprintf("tenant-%d", i)
				}
				p := jobs.InsertParams{Kind: "k", Queue: "default", MaxAttempts: 1}
				for range 10 {
					for _, id := range ids {
						p.Tenant = id
						insert(b, be, p)
					}
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.Tenant = ids[i%tenants]
					if _, err := be.Insert(ctx, p); err != nil {
						b.Fatal(err)
					}
					row, err := be.Claim(ctx, i%4)
					if err != nil {
						b.Fatal(err)
					}
					if err := be.Complete(ctx, row); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestRecordSizes pins the sizes the layout comments rely on: records whose
// size is a size class of 128 or 256 bytes are aligned to it, so their first
// cache line holds what a claim reads; and the Backend's lock-free atomics
// have its first cache line to themselves.
func TestRecordSizes(t *testing.T) {
	var (
		j  job
		tn tenant
		l  tenantLine
		q  queue
		be Backend
	)
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"job", unsafe.Sizeof(j), 256},
		{"tenant", unsafe.Sizeof(tn), 128},
		{"tenantLine", unsafe.Sizeof(l), 128},
		{"queue", unsafe.Sizeof(q), 128},
		{"Backend's lock-free line", unsafe.Offsetof(be.mu), 64},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, want %d (adjust its padding)", c.name, c.got, c.want)
		}
	}
}

// TestLineBuffer checks a tenant's line: FIFO order across growth and
// wrap-around, pushFront, and a buffer that shrinks back after a burst.
func TestLineBuffer(t *testing.T) {
	var l tenantLine
	js := make([]*job, 1000)
	for i := range js {
		js[i] = &job{}
	}
	next, tail := 0, 0 // indexes in js of the oldest job in l and of the next to push
	for round := range 3 {
		for range 300 + round {
			l.pushBack(js[tail%len(js)])
			tail++
		}
		for range 200 {
			if j := l.pop(); j != js[next%len(js)] {
				t.Fatalf("round %d: popped job %p, want job %d", round, j, next%len(js))
			}
			next++
		}
	}
	front := &job{}
	l.pushFront(front)
	if j := l.pop(); j != front {
		t.Fatal("pushFront: the job is not first")
	}
	for l.ready > 0 {
		if j := l.pop(); j != js[next%len(js)] {
			t.Fatalf("popped job %p, want job %d", j, next%len(js))
		}
		next++
	}
	if len(l.first.buf) > minLineBuf {
		t.Errorf("empty line keeps a buffer of %d, want at most %d", len(l.first.buf), minLineBuf)
	}
	for _, j := range l.first.buf {
		if j != nil {
			t.Fatal("an empty line still points to a job")
		}
	}
}

// TestStaleTenantHint: a job whose tenant Insert found in the cache, but
// which was evicted before the job was admitted, goes to a fresh record of
// its tenant, not to the evicted one.
func TestStaleTenantHint(t *testing.T) {
	b := open(t, jobs.OpenParams{Workers: 1, Tenants: jobs.TenantConfig{MaxConcurrent: 1}})
	ctx := context.Background()
	run := func(tenant string) {
		insert(t, b, jobs.InsertParams{Tenant: tenant})
		row, err := b.Claim(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Complete(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	run("a") // a exists, idle and cached
	p := jobs.InsertParams{Kind: "k", Queue: "default", Tenant: "a", MaxAttempts: 1}
	j := b.newJob(&p, b.now())
	b.lookUpHints(j, &p)
	stale := j.tenantHint
	if stale == nil {
		t.Fatal("tenant a is not in the cache")
	}
	for i := range maxIdleTenants { // a is the oldest idle tenant: evicted
		run(fmt.Sprintf("t%d", i))
	}
	if _, err := b.Stats(ctx); err != nil { // applies the last completion
		t.Fatal(err)
	}
	if !stale.evicted {
		t.Fatal("tenant a was not evicted")
	}
	if b.cachedTenant("a") != nil {
		t.Fatal("an evicted tenant is still in the cache")
	}
	j.row.ID = jobs.JobID(b.nextID.Add(1))
	b.inbox.push(j)
	b.inboxLen.Add(1)
	row, err := b.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	fresh := b.tenants["a"]
	if row.Tenant != "a" || fresh == nil || fresh == stale || row.Handle.(*job).line.tenant != fresh {
		t.Fatalf("job of a admitted under tenant %p (stale %p, current %p)", row.Handle.(*job).line.tenant, stale, fresh)
	}
	if err := b.Complete(ctx, row); err != nil {
		t.Fatal(err)
	}
}

// TestNowFollowsTheWallClock: with the system clock, now extrapolates the
// wall clock from a recent reading; it must still read as time.Now would.
func TestNowFollowsTheWallClock(t *testing.T) {
	b := open(t, jobs.OpenParams{Workers: 1, Clock: jobs.SystemClock{}})
	prev := b.now()
	for i := range 1000 {
		before := time.Now()
		got := b.now()
		after := time.Now()
		// Wall clock readings (Round(0) drops the monotonic one), with a
		// millisecond for clock adjustments since the last full reading.
		if got.Round(0).Before(before.Round(0).Add(-time.Millisecond)) || got.Round(0).After(after.Round(0).Add(time.Millisecond)) {
			t.Fatalf("call %d: now() = %v, outside [%v, %v]", i, got, before, after)
		}
		if got.Before(prev) {
			t.Fatalf("call %d: now() went back from %v to %v", i, prev, got)
		}
		prev = got
		if i%100 == 0 {
			time.Sleep(wallResync / 4) // so that some calls follow a resync
		}
	}
}

// TestCancelUnsupported: jobs in memory have no Canceller, and the Client
// says so rather than pretending to cancel.
func TestCancelUnsupported(t *testing.T) {
	ctx := context.Background()
	c, err := jobs.NewClient(ctx, jobs.Config{Workers: 1}, New(), nil, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Stop(ctx) }()
	if err := c.Cancel(ctx, 1); !errors.Is(err, jobs.ErrNoCancel) {
		t.Errorf("Cancel = %v, want ErrNoCancel", err)
	}
	if err := c.CancelTx(ctx, shards.Tx{}, 1); !errors.Is(err, jobs.ErrNoCancel) {
		t.Errorf("CancelTx = %v, want ErrNoCancel", err)
	}
}
