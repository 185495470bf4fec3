package jobstest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

// testEnqueueMany: EnqueueMany gives one result per element in order,
// validates every element before inserting any, reports duplicates of
// active jobs and of earlier elements, and its jobs run with the tenant of
// ctx in the order given.
func testEnqueueMany(t *testing.T, h Harness) {
	var mu sync.Mutex
	var ran []basicArgs
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		ct, _ := tenant.From(ctx)
		if ct != j.Tenant {
			return jobs.Permanent(errors.New("handler context lost the tenant"))
		}
		mu.Lock()
		ran = append(ran, j.Args)
		mu.Unlock()
		return nil
	})
	jobs.Register(w, func(context.Context, *jobs.Job[uniqueArgs]) error { return nil })
	// One worker: jobs of one tenant start in the order they run.
	e := newEnv(t, h, jobs.Config{Workers: 1}, w)
	bg := context.Background()
	acme := tenant.With(bg, "acme")

	if rs, err := e.c.EnqueueMany(bg, nil); err != nil || len(rs) != 0 {
		t.Fatalf("EnqueueMany(nil) = %v, %v; want no results, no error", rs, err)
	}
	// An invalid element fails the call before anything is inserted.
	if _, err := e.c.EnqueueMany(acme, []jobs.Args{basicArgs{Key: "x"}, nil}); err == nil {
		t.Fatal("EnqueueMany with a nil element succeeded")
	}
	if _, err := e.c.EnqueueMany(acme, []jobs.Args{basicArgs{Key: "x"}, badArgs{}}); err == nil {
		t.Fatal("EnqueueMany with an invalid kind succeeded")
	}

	const n = 50
	batch := make([]jobs.Args, n)
	for i := range batch {
		batch[i] = basicArgs{Key: "many", N: i}
	}
	rs, err := e.c.EnqueueMany(acme, batch)
	if err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	if len(rs) != n {
		t.Fatalf("EnqueueMany returned %d results, want %d", len(rs), n)
	}
	ids := map[jobs.JobID]bool{}
	for i, r := range rs {
		if r.ID <= 0 || r.Duplicate || ids[r.ID] {
			t.Fatalf("result %d = %+v: want a new, distinct id (ids so far %v)", i, r, ids)
		}
		ids[r.ID] = true
	}

	// Uniqueness: against an active job, and within the call; plain jobs
	// in between are unaffected.
	first := e.enqueue(acme, uniqueArgs{Key: "a"})
	u, err := e.c.EnqueueMany(acme, []jobs.Args{
		uniqueArgs{Key: "a", Extra: 1}, // duplicate of first
		uniqueArgs{Key: "b"},           // new
		basicArgs{Key: "mixed"},        // new
		uniqueArgs{Key: "b", Extra: 2}, // duplicate of element 1
		uniqueArgs{Key: "c"},           // new
	})
	if err != nil {
		t.Fatalf("EnqueueMany of unique jobs: %v", err)
	}
	if len(u) != 5 {
		t.Fatalf("EnqueueMany of 5 unique jobs returned %d results", len(u))
	}
	if !u[0].Duplicate || u[0].ID != first.ID {
		t.Errorf("element 0 = %+v, want duplicate of the active job %d", u[0], first.ID)
	}
	if !u[3].Duplicate || u[3].ID != u[1].ID {
		t.Errorf("element 3 = %+v, want duplicate of element 1's job %d", u[3], u[1].ID)
	}
	for _, i := range []int{1, 2, 4} {
		if u[i].Duplicate || u[i].ID <= 0 || ids[u[i].ID] || u[i].ID == first.ID {
			t.Errorf("element %d = %+v, want a new job", i, u[i])
		}
		ids[u[i].ID] = true
	}
	// Another tenant does not deduplicate against acme.
	other, err := e.c.EnqueueMany(tenant.With(bg, "zeta"), []jobs.Args{uniqueArgs{Key: "a"}})
	if err != nil || len(other) != 1 || other[0].Duplicate {
		t.Fatalf("EnqueueMany for another tenant = %v, %v; want one new job", other, err)
	}

	e.start()
	e.metricIs(n+1, "cellgate_jobs_completed_total", "kind", "jobstest_basic")
	e.metricIs(4, "cellgate_jobs_completed_total", "kind", "jobstest_unique")
	mu.Lock()
	var order []int
	for _, a := range ran {
		if a.Key == "many" {
			order = append(order, a.N)
		}
	}
	mu.Unlock()
	if len(order) != n || !slices.IsSorted(order) {
		t.Errorf("the batch's jobs ran in order %v, want 0..%d in order", order, n-1)
	}
	e.metricIs(0, "cellgate_jobs_failed_total", "kind", "jobstest_basic")

	// No backend writes a job with no transaction: the local one cannot
	// join one at all.
	if _, err := e.c.EnqueueManyTx(acme, shards.Tx{}, batch); err == nil {
		t.Error("EnqueueManyTx with no transaction succeeded")
	}

	_, _ = e.c.Stop(bg)
	if _, err := e.c.EnqueueMany(acme, batch[:1]); !errors.Is(err, jobs.ErrClosed) {
		t.Errorf("EnqueueMany after Stop: %v, want ErrClosed", err)
	}
}

// testEnqueueManyFair: a batch takes its tenant's places in the fair
// order, so a quiet tenant's job enqueued after a noisy tenant's batch of
// 1,000 still starts within the first two.
func testEnqueueManyFair(t *testing.T, h Harness) {
	tr := newTracker()
	w := tr.workers(nil)
	e := newEnv(t, h, jobs.Config{Workers: 1, Tenants: jobs.TenantConfig{Lanes: 1, LanesPerTenant: 1}}, w)
	bg := context.Background()
	noisy := make([]jobs.Args, 1000)
	for i := range noisy {
		noisy[i] = basicArgs{Key: "A", N: i}
	}
	if _, err := e.c.EnqueueMany(tenant.With(bg, "A"), noisy); err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	if _, err := e.c.EnqueueMany(tenant.With(bg, "B"), []jobs.Args{basicArgs{Key: "B"}}); err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	e.start()
	var order []string
	e.eventually("B's job to start", func() bool {
		order = tr.startOrder()
		return slices.Contains(order, "B")
	})
	if i := slices.Index(order, "B"); i > 1 {
		t.Fatalf("B's only job started as job %d, behind %d of A's batch; want within the first 2", i+1, i)
	}
}
