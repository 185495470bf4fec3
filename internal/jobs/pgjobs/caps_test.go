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
		t.Run(string(mode), func(t *testing.T) { testTenantsAtCap(t, mode) })
	}
}

func testTenantsAtCap(t *testing.T, mode ClaimMode) {
	pool := newSchema(t, newDB(t), 8)
	const capped, backlog, free = 12, 40, 200
	lim := staticLimits{}
	for i := range capped {
		lim[fmt.Sprintf("c%02d", i)] = [2]int{1, 1}
	}
	be, err := NewPool(pool, Config{Claim: mode}, Options{Logger: quietLogger(), Limits: lim})
	if err != nil {
		t.Fatal(err)
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
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 16}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(hold); _, _ = c.Stop(context.Background()) }()
	db := be.Control()
	ctx := context.Background()
	enqueue := func(tenantID string, n int) {
		ps := make([]jobs.InsertParams, n)
		for i := range ps {
			ps[i] = jobs.InsertParams{Kind: "plain", Queue: jobs.DefaultQueue, Tenant: tenantID, EncodedArgs: []byte(`{"n":1}`), MaxAttempts: 1}
		}
		if _, err := db.insertManyNow(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	for i := range capped {
		enqueue(fmt.Sprintf("c%02d", i), backlog)
	}
	time.Sleep(5 * time.Millisecond) // later: behind the capped backlogs in FIFO order too
	enqueue("free", free)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for (freeDone.Load() < free || started.Load() < capped) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if started.Load() != capped {
		t.Fatalf("%d capped jobs started, want %d: one per capped tenant", started.Load(), capped)
	}
	if freeDone.Load() < free {
		t.Fatalf("the uncapped tenant ran %d of its %d jobs in 10 s while %d tenants sat at their caps", freeDone.Load(), free, capped)
	}
}
