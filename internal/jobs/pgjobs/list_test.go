package pgjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
)

// seedListJobs fills a table with jobs of three tenants (and none) in
// every state the list tells apart: placed and unplaced waiting jobs,
// running, completed and failed, two kinds and two queues, ids interleaved
// across tenants and states. It returns every job as the table holds it.
func seedListJobs(t *testing.T, pool *pgxpool.Pool) []JobInfo {
	t.Helper()
	ctx := context.Background()
	// Placed waiting jobs, through the enqueue function (it sets vtime).
	enqueueSQL(t, pool, 0, "a:1-5", "b:1-3", "d:1-2")
	// Unplaced waiting jobs (scheduled for later: vtime NULL).
	enqueueSQL(t, pool, time.Hour, "a:6-7", "c:1-1")
	if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, state, attempt, max_attempts, run_at, created_at, finished_at, vtime)
SELECT CASE WHEN g % 3 = 0 THEN 'other' ELSE 'plain' END,
       CASE WHEN g % 4 = 0 THEN 'billing' ELSE 'default' END,
       (ARRAY['a', 'b', 'c', ''])[g % 4 + 1],
       jsonb_build_object('n', 100 + g),
       (ARRAY['completed', 'failed', 'running', 'completed', 'failed'])[g % 5 + 1],
       1, 5, now(), now(),
       CASE WHEN g % 5 = 2 THEN NULL ELSE now() END,
       CASE WHEN g % 2 = 0 THEN g END
FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	// More placed jobs after the finished ones, so every kind of job sits
	// on both sides of a page boundary.
	enqueueSQL(t, pool, 0, "a:8-10", "c:2-4")
	// Distinct creation times in id order, so a time range cuts every
	// tenant's jobs and every branch of the tenant query somewhere inside.
	if _, err := pool.Exec(ctx, `UPDATE cellgate_jobs SET created_at = '2026-01-01T00:00:00Z'::timestamptz + id * interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE cellgate_jobs`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT `+jobColumns+` FROM cellgate_jobs ORDER BY id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	b := &DB{name: "control"}
	var all []JobInfo
	for rows.Next() {
		j, err := b.scanJob(rows)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

// TestListMatchesFilters: every combination of tenant, state, kind, queue
// and creation-time filter, read in pages of 4 through the keyset cursor, gives
// exactly the matching jobs, newest first, each once: the tenant query's
// three branches together hold all of a tenant's jobs, and the state
// guards drop only branches that cannot match.
func TestListMatchesFilters(t *testing.T) {
	pool := newSchema(t, newDB(t), 4)
	b, err := NewDB(pool, Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := seedListJobs(t, pool)
	ctx := context.Background()
	states := map[State]int{}
	for _, j := range all {
		states[j.State]++
	}
	for _, s := range []State{StateAvailable, StateRunning, StateCompleted, StateFailed} {
		if states[s] < 5 {
			t.Fatalf("seed has %d %s jobs, want several of each state: %v", states[s], s, states)
		}
	}
	// all is newest first: lo and hi cut it at a quarter and three quarters.
	lo, hi := all[len(all)*3/4].CreatedAt, all[len(all)/4].CreatedAt
	ranges := []struct{ from, to time.Time }{{}, {from: lo}, {to: hi}, {from: lo, to: hi}}
	cases := 0
	for _, tenant := range []string{"", "a", "b", "c", "d", "nobody"} {
		for _, state := range []State{"", StateAvailable, StateRunning, StateCompleted, StateFailed} {
			for _, kind := range []string{"", "other"} {
				for _, queue := range []string{"", "billing"} {
					for _, r := range ranges {
						f := ListFilter{Tenant: tenant, State: state, Kind: kind, Queue: queue, Limit: 4, CreatedFrom: r.from, CreatedTo: r.to}
						var want []jobs.JobID
						for _, j := range all {
							if (tenant == "" || j.Tenant == tenant) && (state == "" || j.State == state) &&
								(kind == "" || j.Kind == kind) && (queue == "" || j.Queue == queue) &&
								(r.from.IsZero() || !j.CreatedAt.Before(r.from)) && (r.to.IsZero() || j.CreatedAt.Before(r.to)) {
								want = append(want, j.ID)
							}
						}
						var got []jobs.JobID
						for page := 0; ; page++ {
							jj, err := b.List(ctx, f)
							if err != nil {
								t.Fatalf("%+v: %v", f, err)
							}
							if len(jj) > 4 || page > len(all) {
								t.Fatalf("%+v: page of %d jobs", f, len(jj))
							}
							for _, j := range jj {
								got = append(got, j.ID)
							}
							if len(jj) < 4 {
								break
							}
							f.Before = jj[len(jj)-1].ID
						}
						if !slices.Equal(got, want) {
							t.Errorf("tenant=%q state=%q kind=%q queue=%q from=%v to=%v: got %v, want %v", tenant, state, kind, queue, r.from, r.to, got, want)
						}
						cases++
					}
				}
			}
		}
	}
	if cases != 480 {
		t.Fatalf("ran %d cases", cases)
	}
}

// TestListTenantStateSkipsBranches: a tenant's list with a state filter
// reads only the indexes that can hold jobs in that state. The plan is run
// (EXPLAIN ANALYZE) with sequential and bitmap scans off, so each branch
// that runs is one index scan, and the executed scans are counted: all
// three branches without a state, fewer with one. Without the guard on
// the state parameter, the first branch runs for state=running (PostgreSQL
// does not see that state = 'running' contradicts its state terms).
func TestListTenantStateSkipsBranches(t *testing.T) {
	pool := newSchema(t, newDB(t), 2)
	seedListJobs(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, `RESET enable_seqscan; RESET enable_bitmapscan`) }()
	for state, want := range map[State]int{"": 3, StateAvailable: 2, StateRunning: 1, StateCompleted: 1, StateFailed: 1} {
		var raw []byte
		if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sqlListTenant, pgx.QueryExecModeExec,
			string(state), "", "", "a", 100, int64(0), (*time.Time)(nil), (*time.Time)(nil)).Scan(&raw); err != nil {
			t.Fatalf("state %q: %v", state, err)
		}
		var plan []struct{ Plan planNode }
		if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("state %q: plan %s: %v", state, raw, err)
		}
		scans := plan[0].Plan.executedScans()
		if len(scans) != want {
			t.Errorf("state %q: %d index scans ran (%v), want %d:\n%s", state, len(scans), scans, want, raw)
		}
	}
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node the tests read:
// what it scans and how, and how often it ran.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	TIDCond      string     `json:"TID Cond"`
	Filter       string     `json:"Filter"`
	ActualLoops  float64    `json:"Actual Loops"`
	Plans        []planNode `json:"Plans"`
}

// walk calls f for n and every node under it.
func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// executedScans lists the scans of cellgate_jobs under n that ran at least
// once, by node type and index.
func (n planNode) executedScans() []string {
	var out []string
	n.walk(func(s planNode) {
		if s.ActualLoops > 0 && (s.IndexName != "" || s.NodeType == "Seq Scan" || s.NodeType == "Bitmap Heap Scan") {
			out = append(out, fmt.Sprintf("%s %s", s.NodeType, s.IndexName))
		}
	})
	return out
}

// TestConsoleIndexesNotWrittenByReadyJobs: enqueuing ready jobs and
// claiming them writes no entry in the console's indexes (migration
// 000003); finishing a job does. An empty B-tree is its metapage alone,
// so the index's size tells whether anything was written.
func TestConsoleIndexesNotWrittenByReadyJobs(t *testing.T) {
	pool := newSchema(t, newDB(t), 2)
	ctx := context.Background()
	size := func(index string) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1))`, index).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	indexes := []string{"cellgate_jobs_tenant_list_idx", "cellgate_jobs_failed_idx"}
	empty := map[string]int64{}
	for _, ix := range indexes {
		empty[ix] = size(ix)
		if empty[ix] == 0 {
			t.Fatalf("%s does not exist", ix)
		}
	}
	enqueueSQL(t, pool, 0, "a:1-300", "b:1-300", "c:1-100")
	for _, fair := range []bool{true, false} {
		if _, err := pool.Exec(ctx, `SELECT count(*) FROM cellgate_jobs_claim(now(), 200, $1, '{}', '{}', 256, 'test', '{}', '{}', 256)`, fair); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs WHERE state = 'running'`); n != 400 {
		t.Fatalf("%d running jobs, want 400", n)
	}
	for _, ix := range indexes {
		if got := size(ix); got != empty[ix] {
			t.Errorf("%s grew from %d to %d bytes on ready enqueues and claims", ix, empty[ix], got)
		}
	}
	// A finished job is written: the sizes above could grow.
	if _, err := pool.Exec(ctx, `UPDATE cellgate_jobs SET state = 'failed', finished_at = now() WHERE state = 'running'`); err != nil {
		t.Fatal(err)
	}
	for _, ix := range indexes {
		if got := size(ix); got == empty[ix] {
			t.Errorf("%s stayed %d bytes after 400 jobs failed", ix, got)
		}
	}
}
