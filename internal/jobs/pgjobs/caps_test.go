package pgjobs

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// TestTenantsAtCapNeverStarveOthers: twelve tenants at a cap of 1, their
// running jobs held, with backlogs of 40 (more places together than
// CapLookahead, and in FIFO order ahead of everything else), and an
// uncapped tenant's 200 jobs enqueued after: those run at once, in either
// claim order.
func TestTenantsAtCapNeverStarveOthers(t *testing.T) {
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		t.Run(string(mode), func(t *testing.T) {
			const free = 200
			if _, ran := tenantsAtCap(t, mode, 12, 40, free, 10*time.Second); ran < free {
				t.Fatalf("the uncapped tenant ran %d of its %d jobs in 10 s while 12 tenants sat at their caps", ran, free)
			}
		})
	}
}

// BenchmarkTenantsAtCap is what tenants at their caps cost the others: n
// tenants at a cap of 1, their running jobs held and 200 more waiting
// each, beside an uncapped tenant's 5,000 no-op jobs, run by n+8 workers.
// It reports the uncapped tenant's jobs per second once the capped jobs
// run, and its ratio to the run without capped tenants: each claim steps
// over the placed jobs of the tenants at their caps, up to a quota each.
func BenchmarkTenantsAtCap(b *testing.B) {
	const free = 5000
	var none float64
	for _, n := range []int{0, 12, 40} {
		b.Run(fmt.Sprintf("at-cap=%d", n), func(b *testing.B) {
			var sum float64
			for range b.N {
				rate, ran := tenantsAtCap(b, ClaimFair, n, 200, free, time.Minute)
				if ran < free {
					b.Fatalf("the uncapped tenant ran %d of %d jobs in a minute", ran, free)
				}
				sum += rate
			}
			rate := sum / float64(b.N)
			if n == 0 {
				none = rate
			}
			b.ReportMetric(rate, "others-jobs/s")
			if none > 0 {
				b.ReportMetric(rate/none, "over-none")
			}
		})
	}
}

// tenantsAtCap runs n tenants at a cap of 1, each with backlog jobs (the
// first runs and is held until the end), and then an uncapped tenant's
// free no-op jobs, enqueued after them, on n+8 workers claiming in mode.
// Once every capped tenant has its job running, it waits up to within for
// the uncapped jobs, and returns how many ran and at what rate from then.
func tenantsAtCap(tb testing.TB, mode ClaimMode, n, backlog, free int, within time.Duration) (rate float64, ran int) {
	tb.Helper()
	pool := newSchema(tb, newDB(tb), 8)
	lim := staticLimits{}
	for i := range n {
		lim[fmt.Sprintf("c%02d", i)] = [2]int{1, 1}
	}
	be, err := NewPool(pool, Config{Claim: mode}, Options{Logger: quietLogger(), Limits: lim})
	if err != nil {
		tb.Fatal(err)
	}
	hold := make(chan struct{})
	var started, freeDone atomic.Int32
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		if strings.HasPrefix(j.Tenant, "c") {
			started.Add(1)
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return nil
		}
		freeDone.Add(1)
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: n + 8}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { close(hold); _, _ = c.Stop(context.Background()) }()
	db := be.Control()
	ctx := context.Background()
	enqueue := func(tenantID string, count int) {
		ps := make([]jobs.InsertParams, count)
		for i := range ps {
			ps[i] = jobs.InsertParams{Kind: "plain", Queue: jobs.DefaultQueue, Tenant: tenantID, EncodedArgs: []byte(`{"n":1}`), MaxAttempts: 1}
		}
		if _, err := db.insertManyNow(ctx, ps); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		enqueue(fmt.Sprintf("c%02d", i), backlog)
	}
	time.Sleep(5 * time.Millisecond) // later: behind the capped backlogs in FIFO order too
	enqueue("free", free)
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for started.Load() < int32(n) {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of the %d capped tenants' first jobs started", started.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	start, before := time.Now(), int(freeDone.Load())
	for int(freeDone.Load()) < free && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if int(started.Load()) != n {
		tb.Fatalf("%d capped jobs started, want %d: one per capped tenant (cap 1)", started.Load(), n)
	}
	ran = int(freeDone.Load())
	return float64(ran-before) / time.Since(start).Seconds(), ran
}
