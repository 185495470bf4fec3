package pgjobs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
)

// claimOnce calls cellgate_jobs_claim in tx and returns the claimed jobs as
// tenant+n strings in hand-out order, and the hint row's tenant ("" if none).
func claimOnce(t *testing.T, tx pgx.Tx, limit int, fair bool, cursor *string, quantum int) ([]string, string) {
	t.Helper()
	rows, err := tx.Query(context.Background(), `
SELECT job_id, job_tenant, coalesce(job_args->>'n', ''), job_ord
FROM cellgate_jobs_claim(now(), $1, $2, $3, '{}', '{}', 256, 'test', '{}', '{}', $4)
ORDER BY job_ord`, limit, fair, cursor, quantum)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	hint := ""
	for rows.Next() {
		var id int64
		var tn, n string
		var ord int32
		if err := rows.Scan(&id, &tn, &n, &ord); err != nil {
			t.Fatal(err)
		}
		if id == 0 {
			hint = tn
			continue
		}
		got = append(got, tn+n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got, hint
}

// seedTenants inserts per jobs for each tenant, each tenant's job n older
// than its job n+1.
func seedTenants(t *testing.T, pool *pgxpool.Pool, tenants []string, per int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
SELECT 'plain', 'default', t, jsonb_build_object('n', g), 5, now() - (1000 - g) * interval '1 second', now()
FROM generate_series(1, $2::int) g, unnest($1::text[]) t`, tenants, per); err != nil {
		t.Fatal(err)
	}
}

// TestFairClaimSQL pins the fair claim's order: one job per tenant per turn
// from the cursor (or p_quantum), the ring wrapping round, an equal share
// when the ring is shorter than the batch, and, when another claimer holds
// some of the jobs the walk found, the others plus a hint row that moves
// the cursor to the end of the walk.
func TestFairClaimSQL(t *testing.T) {
	pool := newSchema(t, newDB(t), 3)
	ctx := context.Background()
	seedTenants(t, pool, []string{"a", "b", "c", "d", "e", "f"}, 4)
	b := "b"
	e := "e"
	check := func(name string, limit int, cursor *string, quantum int, want, wantHint string) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		got, hint := claimOnce(t, tx, limit, true, cursor, quantum)
		if strings.Join(got, " ") != want || hint != wantHint {
			t.Errorf("%s: got %q hint %q, want %q hint %q", name, strings.Join(got, " "), hint, want, wantHint)
		}
	}
	check("one per tenant from the cursor", 4, &b, 1, "c1 d1 e1 f1", "")
	check("wraps round", 4, &e, 1, "f1 a1 b1 c1", "")
	check("quantum 2", 5, &b, 2, "c1 c2 d1 d2 e1", "")
	check("equal share of a short ring", 12, nil, 1, "a1 b1 c1 d1 e1 f1 a2 b2 c2 d2 e2 f2", "")

	// Another claimer holds d1 and e1.
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT id FROM cellgate_jobs WHERE tenant IN ('d', 'e') AND args->>'n' = '1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	check("skips held jobs, hints the walk's end", 4, &b, 1, "c1 f1", "f")
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

// TestRingAfter: the ring estimate that raises the fair quantum for a short
// ring is set only when a claim saw the whole ring, and dropped when
// tenants may have joined.
func TestRingAfter(t *testing.T) {
	b := &Backend{cfg: Config{FairQuantum: 1}}
	rows := func(tenants ...string) []*jobs.JobRow {
		var out []*jobs.JobRow
		for _, tn := range tenants {
			out = append(out, &jobs.JobRow{Tenant: tn})
		}
		return out
	}
	c := "c"
	for _, tc := range []struct {
		name   string
		rows   []*jobs.JobRow
		n, q   int
		cursor *string
		want   int
	}{
		{"full batch, one per tenant", rows("d", "e", "f"), 3, 1, &c, 0},
		{"short claim", rows("d", "a"), 3, 1, &c, 2},
		{"equal share", rows("a", "b", "a", "b"), 4, 1, nil, 2},
		{"raised quantum, went round", rows("d", "d", "a", "a"), 4, 2, &c, 2},
		{"raised quantum, did not go round", rows("d", "d", "e", "e"), 4, 2, &c, 0},
	} {
		if got := b.ringAfter(tc.rows, tc.n, tc.q, tc.cursor); got != tc.want {
			t.Errorf("%s: ring %d, want %d", tc.name, got, tc.want)
		}
	}
}
