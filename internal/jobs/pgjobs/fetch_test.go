package pgjobs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
)

// seedTenants inserts per jobs for each tenant, each tenant's job n older
// than its job n+1, by hand (without places: fair claims place them).
func seedTenants(t *testing.T, pool *pgxpool.Pool, tenants []string, per int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
SELECT 'plain', 'default', t, jsonb_build_object('n', g), 5, now() - (1000 - g) * interval '1 second', now()
FROM generate_series(1, $2::int) g, unnest($1::text[]) t`, tenants, per); err != nil {
		t.Fatal(err)
	}
}

// enqueueSQL inserts jobs through cellgate_jobs_insert_many, the batched
// enqueue: for each "tenant:from-to" spec, that tenant's jobs n = from..to,
// in that order, due after runIn.
func enqueueSQL(t *testing.T, pool *pgxpool.Pool, runIn time.Duration, specs ...string) {
	t.Helper()
	var kinds, queues, tenants, args []string
	var maxAttempts []int32
	var prios []int16
	var runAts []time.Time
	now := time.Now()
	for _, spec := range specs {
		var tn string
		var from, to int
		if _, err := fmt.Sscanf(strings.Replace(spec, ":", " ", 1), "%s %d-%d", &tn, &from, &to); err != nil {
			t.Fatalf("spec %q: %v", spec, err)
		}
		for n := from; n <= to; n++ {
			kinds, queues, tenants = append(kinds, "plain"), append(queues, "default"), append(tenants, tn)
			args = append(args, fmt.Sprintf(`{"n": %d}`, n))
			maxAttempts, runAts, prios = append(maxAttempts, 5), append(runAts, now.Add(runIn)), append(prios, 1)
		}
	}
	if _, err := pool.Exec(context.Background(), sqlInsertMany, kinds, queues, tenants, args, maxAttempts, runAts, now, prios); err != nil {
		t.Fatal(err)
	}
}

// TestFairClaimSQL pins the fair order: every tenant with waiting jobs gets
// one job per round, a tenant that joins (or comes back) joins the next
// round, a backlog holds one place per job, a scheduled job is placed when
// a claim finds it due, and a tenant that keeps coming back with one job
// at a time does not starve a backlog.
func TestFairClaimSQL(t *testing.T) {
	pool := newSchema(t, newDB(t), 3)
	claim := func(name string, at time.Duration, limit int, want string) {
		t.Helper()
		fairClaimCommitted(t, pool, name, at, limit, want)
	}
	enqueueSQL(t, pool, 0, "a:1-4", "b:1-4", "c:1-1")
	claim("round 0: each tenant's first job, in enqueue order", 0, 3, "a1 b1 c1")
	enqueueSQL(t, pool, 0, "d:1-1", "c:2-2")
	claim("a new tenant and a returning one join the next round", 0, 4, "a2 b2 d1 c2")
	enqueueSQL(t, pool, 0, "noisy:1-300")
	enqueueSQL(t, pool, 0, "q:1-1")
	claim("a quiet job behind a backlog waits one round", 0, 4, "a3 b3 noisy1 q1")
	enqueueSQL(t, pool, time.Hour, "s:1-1")
	claim("a scheduled job waits", 0, 3, "a4 b4 noisy2")
	claim("and is placed in the next round once due", 2*time.Hour, 3, "noisy3 s1 noisy4")
	// A tenant that enqueues its next job whenever the last one was taken
	// joins the next round each time: it does not hold the head's place
	// while the backlog behind it waits.
	for k := 1; k <= 3; k++ {
		enqueueSQL(t, pool, 0, fmt.Sprintf("loop:%d-%d", k, k))
		claim("a tenant that keeps coming back", 2*time.Hour, 2, fmt.Sprintf("noisy%d loop%d", k+4, k))
	}
}

// fairClaimCommitted makes a fair claim of limit jobs at now+at, checks
// the jobs it hands out (tenant+n, in hand-out order) against want, and
// commits it.
func fairClaimCommitted(t *testing.T, pool *pgxpool.Pool, name string, at time.Duration, limit int, want string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `
SELECT job_tenant, coalesce(job_args->>'n', '')
FROM cellgate_jobs_claim(now() + $1 * interval '1 microsecond', $2, true, '{}', '{}', 256, 'test', '{}', '{}', 256)
ORDER BY job_ord`, at.Microseconds(), limit)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var tn, n string
		if err := rows.Scan(&tn, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, tn+n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("%s: got %q, want %q", name, g, want)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPlacesFollowTheTenantsLine: several jobs of one tenant enqueued in
// one batch go after that tenant's waiting jobs, one place each.
func TestPlacesFollowTheTenantsLine(t *testing.T) {
	pool := newSchema(t, newDB(t), 3)
	enqueueSQL(t, pool, 0, "a:1-2", "b:1-1")
	enqueueSQL(t, pool, 0, "a:3-4", "b:2-2")
	fairClaimCommitted(t, pool, "two batches", 0, 6, "a1 b1 a2 b2 a3 a4")
}

// TestFairClaimsAcrossBackends: four backends (as four processes) claim
// fairly from one table at once; every job runs exactly once.
func TestFairClaimsAcrossBackends(t *testing.T) {
	dsn := newDB(t)
	pool := newSchema(t, dsn, 4)
	const tenants, per = 40, 50
	var names []string
	for i := range tenants {
		names = append(names, fmt.Sprintf("t%02d", i))
	}
	seedTenants(t, pool, names, per)
	var runs sync.Map
	var done atomic.Int32
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		if _, dup := runs.LoadOrStore(j.ID, true); dup {
			t.Errorf("job %d ran twice", j.ID)
		}
		done.Add(1)
		return nil
	})
	for range 4 {
		c, _ := newClient(t, pool, Config{Claim: ClaimFair, PollInterval: 20 * time.Millisecond}, 4, w)
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "every job run", func() bool { return done.Load() == tenants*per })
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs WHERE state = 'available'`); n != 0 {
		t.Fatalf("%d jobs still available", n)
	}
}

// TestLongJobsAreNotPrefetched: workers that keep their jobs ask for none
// while a claim is in flight, so the backend claims no job ahead of them.
func TestLongJobsAreNotPrefetched(t *testing.T) {
	pool := newSchema(t, newDB(t), 3)
	seedTenants(t, pool, []string{"a"}, 50)
	release := make(chan struct{})
	var started atomic.Int32
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		started.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	c, _ := newClient(t, pool, Config{PollInterval: 20 * time.Millisecond}, 4, w)
	t.Cleanup(func() { close(release) }) // before the client's Stop
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "four jobs started", func() bool { return started.Load() == 4 })
	time.Sleep(100 * time.Millisecond) // polls and claims that would prefetch
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs WHERE state = 'running'`); n != 4 {
		t.Fatalf("%d jobs running in the table with 4 busy workers, want 4", n)
	}
}
