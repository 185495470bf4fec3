package pgjobs

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/jobstest"
)

// TestConformance runs the backend contract against both claim orders. Each
// backend gets its own schema in one test database; the cross-process case
// puts two backends on one schema.
func TestConformance(t *testing.T) {
	dsn := newDB(t)
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := Config{Claim: mode, PollInterval: 50 * time.Millisecond, LimitsEvery: 100 * time.Millisecond}
			open := func(tb testing.TB, pool *pgxpool.Pool, l jobs.TenantLimits) jobs.Backend {
				b, err := NewPool(pool, cfg, Options{Logger: quietLogger(), Limits: l})
				if err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(func() { _ = b.Close(context.Background()) })
				return b
			}
			jobstest.RunConformance(t, jobstest.Harness{
				NewBackend: func(tb testing.TB) jobs.Backend {
					return open(tb, newSchema(tb, dsn, 4), nil)
				},
				NewLimitedBackend: func(tb testing.TB, l jobs.TenantLimits) jobs.Backend {
					return open(tb, newSchema(tb, dsn, 4), l)
				},
				NewSharedBackends: func(tb testing.TB, l jobs.TenantLimits) (jobs.Backend, jobs.Backend) {
					pool := newSchema(tb, dsn, 4)
					other := newPool(tb, dsn, pool.Config().ConnConfig.RuntimeParams["search_path"], 4)
					return open(tb, pool, l), open(tb, other, l)
				},
				// FIFO claims take jobs in enqueue order, whatever their
				// tenant's weight or their priority (docs/jobs-postgres.md).
				NoFairOrder: mode == ClaimFIFO,
				Settle:      200 * time.Millisecond,
			})
		})
	}
}

// TestPeriodicFailover: two processes on one database schedule one
// periodic entry; each of 10 periods is enqueued exactly once while the
// leader is stopped once (jobstest.RunPeriodicFailover).
func TestPeriodicFailover(t *testing.T) {
	dsn := newMigratedDB(t)
	jobstest.RunPeriodicFailover(t, jobstest.PeriodicHarness{
		NewBackend: func(tb testing.TB) jobs.Backend {
			// A fast maintenance tick, so the survivor takes the lead
			// soon; RescueAfter far beyond the fake clock's 10 minutes.
			b, err := NewPool(newPool(tb, dsn, "", 4), Config{RescueAfter: time.Hour, MaintenanceEvery: 50 * time.Millisecond,
				PollInterval: 50 * time.Millisecond}, Options{Logger: quietLogger()})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = b.Close(context.Background()) })
			return b
		},
		Leader: func(b jobs.Backend) bool { return b.(*Backend).Control().IsLeader() },
	})
}
