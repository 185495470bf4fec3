package jobstest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

func testFairness(t *testing.T, h Harness) {
	run := func(t *testing.T, enqueue func(e *env), until func(order []string) bool) []string {
		t.Helper()
		tr := newTracker()
		w := tr.workers(nil)
		// One worker: the start order is the dequeue order. Isolation is on
		// through one lane, without slots: a slot limit of 1 would rotate
		// tenants by itself and hide a broken round-robin.
		e := newEnv(t, h, jobs.Config{Workers: 1, Tenants: jobs.TenantConfig{Lanes: 1, LanesPerTenant: 1}}, w)
		enqueue(e)
		e.start()
		var order []string
		e.eventually("the jobs under test to start", func() bool {
			order = tr.startOrder()
			return until(order)
		})
		return order
	}
	many := func(e *env, id string, n int) {
		ctx := tenant.With(context.Background(), id)
		for i := range n {
			e.enqueue(ctx, basicArgs{Key: id, N: i})
		}
	}

	t.Run("QuietBehindNoisy", func(t *testing.T) {
		t.Parallel()
		order := run(t, func(e *env) {
			many(e, "A", 1000)
			many(e, "B", 1)
		}, func(o []string) bool { return slices.Contains(o, "B") })
		if i := slices.Index(order, "B"); i > 1 {
			t.Fatalf("B's only job started as job %d, behind %d of A's backlog; want within the first 2", i+1, i)
		}
	})

	t.Run("NoTenantIsOnePlace", func(t *testing.T) {
		t.Parallel()
		order := run(t, func(e *env) {
			many(e, "A", 200)
			for i := range 50 {
				e.enqueue(context.Background(), basicArgs{Key: "none", N: i})
			}
			many(e, "B", 1)
		}, func(o []string) bool { return len(o) >= 3 })
		first := slices.Clone(order[:3])
		slices.Sort(first)
		if !slices.Equal(first, []string{"A", "B", "none"}) {
			t.Fatalf("first 3 starts = %v, want one each of A, B and the no-tenant jobs", order[:3])
		}
	})

	t.Run("RoundRobin", func(t *testing.T) {
		t.Parallel()
		order := run(t, func(e *env) {
			for _, id := range []string{"A", "B", "C"} {
				many(e, id, 100)
			}
		}, func(o []string) bool { return len(o) >= 30 })
		count := map[string]int{}
		for _, g := range order[:30] {
			count[g]++
		}
		if count["A"] != 10 || count["B"] != 10 || count["C"] != 10 {
			t.Fatalf("first 30 starts per tenant = %v, want 10 each", count)
		}
	})
}

func testSlots(t *testing.T, h Harness) {
	tr := newTracker()
	var e *env
	w := tr.workers(func(ctx context.Context, _ *jobs.Job[basicArgs]) { e.block(ctx) })
	e = newEnv(t, h, jobs.Config{Workers: 8, Tenants: jobs.TenantConfig{MaxConcurrent: 2}}, w)
	bg := context.Background()
	for _, c := range []struct {
		ctx context.Context
		n   int
	}{{tenant.With(bg, "A"), 6}, {tenant.With(bg, "B"), 2}, {bg, 3}} {
		for i := range c.n {
			e.enqueue(c.ctx, basicArgs{Key: "slots", N: i})
		}
	}
	e.start()
	// 8 workers: A 2, B 2, no tenant 3 (not limited), one worker idle.
	e.eventually("A 2, B 2 and 3 jobs without a tenant running", func() bool {
		return tr.runningOf("A") == 2 && tr.runningOf("B") == 2 && tr.runningOf("none") == 3
	})
	e.never("a tenant ran more than max_concurrent jobs with idle workers", func() bool {
		return tr.runningOf("A") > 2 || tr.runningOf("B") > 2
	})
	e.metricIs(7, "cellgate_jobs_running")
	e.unblock()
	e.eventually("all 11 jobs done", func() bool { return tr.endedCount() == 11 })
	if a, b, n := tr.maxOf("A"), tr.maxOf("B"), tr.maxOf("none"); a != 2 || b != 2 || n != 3 {
		t.Fatalf("peak running A %d, B %d, no tenant %d; want 2, 2, 3", a, b, n)
	}
}

// disjointTenants returns two tenant ids whose lanes share nothing, and the
// lanes of the first.
func disjointTenants(t *testing.T, lanes, perTenant int) (x, y string, xLanes []int) {
	t.Helper()
	x = "lanes-x"
	xLanes = jobs.ShuffleShard(x, lanes, perTenant)
	for i := range 10000 {
		y = "lanes-y" + strconv.Itoa(i)
		yl := jobs.ShuffleShard(y, lanes, perTenant)
		if !slices.ContainsFunc(yl, func(l int) bool { return slices.Contains(xLanes, l) }) {
			return x, y, xLanes
		}
	}
	t.Fatalf("no tenant with lanes disjoint from %v", xLanes)
	return
}

func testLanes(t *testing.T, h Harness) {
	for _, tc := range []struct {
		workers, lanes, perTenant int
	}{
		{4, 4, 2}, // one worker per lane
		{8, 4, 1}, // two workers per lane
	} {
		t.Run(fmt.Sprintf("workers=%d,lanes=%d,per_tenant=%d", tc.workers, tc.lanes, tc.perTenant), func(t *testing.T) {
			t.Parallel()
			x, y, xLanes := disjointTenants(t, tc.lanes, tc.perTenant)
			perLane := tc.workers / tc.lanes
			maxX := tc.perTenant * perLane // workers of X's lanes
			tr := newTracker()
			var e *env
			w := tr.workers(func(ctx context.Context, j *jobs.Job[basicArgs]) {
				if j.Tenant == x {
					e.block(ctx) // blocks "forever": until the test ends
				}
			})
			e = newEnv(t, h, jobs.Config{Workers: tc.workers, Tenants: jobs.TenantConfig{Lanes: tc.lanes, LanesPerTenant: tc.perTenant}}, w)
			bg := context.Background()
			for i := range 3 * tc.workers {
				e.enqueue(tenant.With(bg, x), basicArgs{Key: "x", N: i})
			}
			e.start()
			e.eventually(fmt.Sprintf("%s running %d jobs", x, maxX), func() bool { return tr.runningOf(x) == maxX })
			e.never(fmt.Sprintf("%s ran on more than its %d lanes", x, tc.perTenant), func() bool { return tr.runningOf(x) > maxX })
			for lane := range tc.lanes {
				want := 0.0
				if slices.Contains(xLanes, lane) {
					want = float64(perLane)
				}
				e.metricIs(want, "cellgate_jobs_lane_busy_workers", "lane", strconv.Itoa(lane))
			}
			// A tenant on other lanes, and jobs without a tenant, still get done.
			const yJobs, noneJobs = 20, 10
			for i := range yJobs {
				e.enqueue(tenant.With(bg, y), basicArgs{Key: "y", N: i})
			}
			for i := range noneJobs {
				e.enqueue(bg, basicArgs{Key: "none", N: i})
			}
			e.eventually("the other tenant's and the no-tenant jobs done", func() bool {
				return tr.endedCount() == yJobs+noneJobs
			})
			if n := tr.runningOf(x); n != maxX {
				t.Fatalf("%s running %d, want still %d", x, n, maxX)
			}
		})
	}
}
