package pgjobs

import (
	"context"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
)

// staticLimits is a fixed per-tenant table; other tenants: no cap, weight 1.
type staticLimits map[string][2]int

func (m staticLimits) JobLimits(t string) (int, int) {
	if v, ok := m[t]; ok {
		return v[0], v[1]
	}
	return 0, 1
}

// TestLimitsRowsAndReplacing: a tenant's first enqueue writes its limits
// row and places its jobs one weight-step apart, up to the 32 places a
// capped tenant holds (the other 8 of its 40 are held); a change to weight
// 4 without a cap written by SyncLimits re-places its waiting backlog with
// the new step and places the held jobs after it; a raised cap places the
// held jobs it leaves room for.
func TestLimitsRowsAndReplacing(t *testing.T) {
	pool := newSchema(t, newDB(t), 4)
	lim := staticLimits{"A": {3, 2}}
	be, err := NewPool(pool, Config{}, Options{Logger: quietLogger(), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	db := be.Control()
	ctx := context.Background()
	ps := make([]jobs.InsertParams, 40)
	for i := range ps {
		ps[i] = jobs.InsertParams{Kind: "bench_noop", Queue: jobs.DefaultQueue, Tenant: "A", EncodedArgs: []byte(`{"n":1}`), MaxAttempts: 1}
	}
	if _, err := db.insertManyNow(ctx, ps); err != nil {
		t.Fatal(err)
	}
	var mr, w int
	if err := pool.QueryRow(ctx, `SELECT max_running, weight FROM cellgate_jobs_tenant_limits WHERE tenant = 'A'`).Scan(&mr, &w); err != nil {
		t.Fatalf("A's limits row: %v", err)
	}
	if mr != 3 || w != 2 {
		t.Fatalf("A's row = (%d, %d), want (3, 2)", mr, w)
	}
	steps := func() []int64 {
		rows, err := pool.Query(ctx, `SELECT vtime - lag(vtime) OVER (ORDER BY vtime) FROM cellgate_jobs WHERE vtime IS NOT NULL ORDER BY vtime OFFSET 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var d int64
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	placedHeld := func() (placed, held int) {
		if err := pool.QueryRow(ctx, `SELECT count(vtime), count(*) FILTER (WHERE held) FROM cellgate_jobs`).Scan(&placed, &held); err != nil {
			t.Fatal(err)
		}
		return placed, held
	}
	if p, h := placedHeld(); p != 32 || h != 8 {
		t.Fatalf("with a cap of 3, %d of A's 40 jobs placed and %d held, want 32 and 8", p, h)
	}
	for _, d := range steps() {
		if d != 720720/2 {
			t.Fatalf("places of a weight-2 tenant %v apart, want %d", steps(), 720720/2)
		}
	}
	lim["A"] = [2]int{0, 4}
	if err := db.SyncLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT max_running, weight FROM cellgate_jobs_tenant_limits WHERE tenant = 'A'`).Scan(&mr, &w); err != nil {
		t.Fatal(err)
	}
	if mr != 0 || w != 4 {
		t.Fatalf("A's row after the change = (%d, %d), want (0, 4)", mr, w)
	}
	if p, h := placedHeld(); p != 40 || h != 0 {
		t.Fatalf("without a cap, %d of A's 40 jobs placed and %d held, want 40 and 0", p, h)
	}
	for _, d := range steps() {
		if d != 720720/4 {
			t.Fatalf("after the weight change to 4, places %v apart, want %d", steps(), 720720/4)
		}
	}

	// A raised cap places the held jobs it leaves room for.
	lim["B"] = [2]int{3, 1}
	for i := range ps {
		ps[i].Tenant = "B"
	}
	if _, err := db.insertManyNow(ctx, ps); err != nil {
		t.Fatal(err)
	}
	placedHeldB := func() (placed, held int) {
		if err := pool.QueryRow(ctx, `SELECT count(vtime), count(*) FILTER (WHERE held) FROM cellgate_jobs WHERE tenant = 'B'`).Scan(&placed, &held); err != nil {
			t.Fatal(err)
		}
		return placed, held
	}
	if p, h := placedHeldB(); p != 32 || h != 8 {
		t.Fatalf("with a cap of 3, %d of B's 40 jobs placed and %d held, want 32 and 8", p, h)
	}
	lim["B"] = [2]int{40, 1}
	if err := db.SyncLimits(ctx); err != nil {
		t.Fatal(err)
	}
	if p, h := placedHeldB(); p != 40 || h != 0 {
		t.Fatalf("with the cap raised to 40, %d of B's 40 jobs placed and %d held, want 40 and 0", p, h)
	}
}
