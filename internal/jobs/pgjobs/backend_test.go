package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

type cappedArgs struct {
	N int `json:"n"`
}

func (cappedArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "capped", Concurrency: 2} }

// registerHeldCapped registers a cappedArgs handler that counts its starts
// in started and holds every job until hold is closed (or the job's
// context ends): the kind stays at its cap while the test runs.
func registerHeldCapped(w *jobs.Workers, hold <-chan struct{}, started *atomic.Int32) {
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[cappedArgs]) error {
		started.Add(1)
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	})
}

type onceArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func (onceArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "once", UniqueBy: []string{"key"}}
}

func (a onceArgs) UniqueKey() string { return jobs.UniqueKeyOf(a.Key) }

type plainArgs struct {
	N int `json:"n"`
}

func (plainArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "plain"} }

// newClient opens a Client with w on a new DB over pool.
func newClient(tb testing.TB, pool *pgxpool.Pool, cfg Config, workers int, w *jobs.Workers) (*jobs.Client, *DB) {
	tb.Helper()
	b, err := NewPool(pool, cfg, Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: workers}, b, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = c.Stop(context.Background()) })
	return c, b.Control()
}

// TestCapAndUniquenessUnderConcurrency: 16 workers on 4 backends (four
// processes, as far as the table can tell) never run more than 2 jobs of a
// kind with concurrency 2; concurrent enqueues of one unique key make one
// job; every job runs exactly once.
func TestCapAndUniquenessUnderConcurrency(t *testing.T) {
	dsn := newMigratedDB(t)
	const capped, keys, enqueuers = 200, 20, 8
	var cur, peak atomic.Int32
	var runs sync.Map
	var cappedDone, onceDone atomic.Int32
	release := make(chan struct{})
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[cappedArgs]) error {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		cur.Add(-1)
		if v, loaded := runs.LoadOrStore(fmt.Sprint("c", j.ID), 1); loaded {
			t.Errorf("capped job %d ran twice (%v)", j.ID, v)
		}
		cappedDone.Add(1)
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[onceArgs]) error {
		<-release // active until every enqueue is done, so each enqueue of the key finds it
		if _, loaded := runs.LoadOrStore(fmt.Sprint("o", j.Args.Key), 1); loaded {
			t.Errorf("a second job of unique key %s ran", j.Args.Key)
		}
		onceDone.Add(1)
		return nil
	})
	cfg := Config{PollInterval: 5 * time.Millisecond, ClaimBatch: 2}
	// 16 workers on 4 backends: 4 fetchers race for the kind's capacity.
	var cs []*jobs.Client
	for range 4 {
		c, _ := newClient(t, newPool(t, dsn, "", 3), cfg, 4, w)
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	ids := make([]sync.Map, keys) // key → set of ids returned
	var wg sync.WaitGroup
	var enqErr atomic.Value
	for e := range enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[e%len(cs)]
			ctx := tenant.With(context.Background(), "acme")
			for i := range capped / enqueuers {
				if _, err := c.Enqueue(ctx, cappedArgs{N: e*1000 + i}); err != nil {
					enqErr.Store(err)
					return
				}
				for k := range keys {
					r, err := c.Enqueue(ctx, onceArgs{Key: fmt.Sprint("k", k), N: i})
					if err != nil {
						enqErr.Store(err)
						return
					}
					ids[k].Store(r.ID, true)
				}
			}
		}()
	}
	wg.Wait()
	close(release)
	if err, _ := enqErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	for k := range ids {
		var got []jobs.JobID
		ids[k].Range(func(id, _ any) bool { got = append(got, id.(jobs.JobID)); return true })
		if len(got) != 1 {
			t.Errorf("key k%d: concurrent enqueues returned ids %v, want one", k, got)
		}
	}
	eventually(t, 30*time.Second, "every capped job", func() bool { return cappedDone.Load() == capped })
	eventually(t, 10*time.Second, "every unique job", func() bool { return onceDone.Load() == keys })
	if p := peak.Load(); p > 2 || p < 1 {
		t.Fatalf("peak running jobs of the kind with concurrency 2 = %d", p)
	}
	t.Logf("peak concurrency of the capped kind: %d", peak.Load())
}

// TestClaimOrder: with one worker, fair claims serve a quiet tenant behind
// a noisy tenant's backlog at once; FIFO claims serve it after the backlog.
func TestClaimOrder(t *testing.T) {
	dsn := newDB(t)
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		t.Run(string(mode), func(t *testing.T) {
			pool := newSchema(t, dsn, 3)
			var mu sync.Mutex
			var order []string
			w := jobs.NewWorkers()
			jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
				mu.Lock()
				order = append(order, j.Tenant)
				mu.Unlock()
				return nil
			})
			c, _ := newClient(t, pool, Config{Claim: mode, PollInterval: 20 * time.Millisecond}, 1, w)
			ctx := context.Background()
			// Insert the noisy backlog in one statement, older than the quiet
			// tenants' jobs.
			if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
SELECT 'plain', 'default', 'noisy', '{"n": 1}', 5, now() - interval '1 minute', now() FROM generate_series(1, 300)`); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"quiet-a", "quiet-b", ""} {
				if _, err := c.Enqueue(tenant.With(ctx, q), plainArgs{N: 2}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the quiet tenants' jobs", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(order, "quiet-a") && slices.Contains(order, "quiet-b") && slices.Contains(order, "")
			})
			mu.Lock()
			last := max(slices.Index(order, "quiet-a"), slices.Index(order, "quiet-b"), slices.Index(order, ""))
			mu.Unlock()
			if mode == ClaimFair && last > 6 {
				t.Errorf("fair: the three quiet jobs started by position %d, want within the first 7 (round-robin)", last)
			}
			if mode == ClaimFIFO && last < 300 {
				t.Errorf("fifo: a quiet job started at position %d, before the older backlog", last)
			}
		})
	}
}

// TestFairSkipsTenantsHeldByCaps: when every ready job of many tenants is
// of a kind at its cap, a fair claim looks past them (within CapLookahead
// places) to the tenant that has other work.
func TestFairSkipsTenantsHeldByCaps(t *testing.T) {
	pool := newSchema(t, newDB(t), 3)
	ctx := context.Background()
	hold := make(chan struct{})
	var cappedStarted atomic.Int32
	plainRan := make(chan string, 1)
	w := jobs.NewWorkers()
	registerHeldCapped(w, hold, &cappedStarted)
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		plainRan <- j.Tenant
		return nil
	})
	c, _ := newClient(t, pool, Config{Claim: ClaimFair, PollInterval: 20 * time.Millisecond}, 3, w)
	t.Cleanup(func() { close(hold) }) // runs before the client's Stop
	// 200 tenants whose only jobs are capped; tenant "zz" sorts after them.
	if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
SELECT 'capped', 'default', 't' || lpad(g::text, 3, '0'), '{"n": 1}', 5, now() - interval '1 minute', now()
FROM generate_series(1, 200) g`); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the capped kind at its cap", func() bool { return cappedStarted.Load() == 2 })
	if _, err := c.Enqueue(tenant.With(ctx, "zz"), plainArgs{N: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case tn := <-plainRan:
		if tn != "zz" {
			t.Fatalf("plain job ran for %q", tn)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the uncapped job behind 198 held tenants never ran")
	}
	if n := cappedStarted.Load(); n != 2 {
		t.Fatalf("%d capped jobs started, want 2", n)
	}
}

// TestCoalescedInsertsKeepTheirIDs: concurrent plain enqueues, written by
// shared multi-row INSERTs, each get the id of their own row.
func TestCoalescedInsertsKeepTheirIDs(t *testing.T) {
	pool := newMigratedPool(t, 8)
	c, _ := newClient(t, pool, Config{InsertBatch: 64}, 1, nil)
	const producers, each = 32, 40
	type rec struct {
		id jobs.JobID
		n  int
	}
	recs := make(chan rec, producers*each)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := tenant.With(context.Background(), fmt.Sprint("t", p%5))
			for i := range each {
				n := p*1000 + i
				r, err := c.Enqueue(ctx, plainArgs{N: n})
				if err != nil || r.Duplicate {
					t.Errorf("Enqueue: %+v, %v", r, err)
					return
				}
				recs <- rec{r.ID, n}
			}
		}()
	}
	wg.Wait()
	close(recs)
	got := 0
	for r := range recs {
		var n int
		var ten string
		if err := pool.QueryRow(context.Background(), `SELECT (args->>'n')::int, tenant FROM cellgate_jobs WHERE id = $1`, int64(r.id)).Scan(&n, &ten); err != nil {
			t.Fatalf("job %d: %v", r.id, err)
		}
		if n != r.n || ten != fmt.Sprint("t", (r.n/1000)%5) {
			t.Fatalf("id %d holds n=%d of %s, want n=%d", r.id, n, ten, r.n)
		}
		got++
	}
	if got != producers*each {
		t.Fatalf("%d enqueues, want %d", got, producers*each)
	}
	var batched int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT created_at FROM cellgate_jobs GROUP BY created_at HAVING count(*) > 1) s`).Scan(&batched); err != nil {
		t.Fatal(err)
	}
	if batched == 0 {
		t.Error("no two jobs share an INSERT: the coalescer never batched")
	}
}

func newMigratedPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return newPool(tb, newMigratedDB(tb), "", maxConns)
}

// TestMaintenance: one leader per table; rescue fails a job that used its
// last attempt; retention deletes finished jobs past retention only.
func TestMaintenance(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx := context.Background()
	pool := newPool(t, dsn, "", 4)
	cfg := Config{RescueAfter: time.Minute, Retention: time.Hour, PollInterval: time.Hour}
	b1, err := NewDB(pool, cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := NewDB(newPool(t, dsn, "", 2), cfg, Options{Logger: quietLogger(), Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*DB{b1, b2} {
		if err := b.open(ctx, jobs.OpenParams{Workers: 1}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.close(context.Background()) })
	}
	r1, err1 := b1.RunMaintenance(ctx)
	r2, err2 := b2.RunMaintenance(ctx)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if r1.Leader == r2.Leader {
		t.Fatalf("leaders: %v and %v, want exactly one", r1.Leader, r2.Leader)
	}
	leader := b1
	if r2.Leader {
		leader = b2
	}

	old := time.Now().Add(-2 * time.Hour)
	_, err = pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, args, max_attempts, state, attempt, run_at, created_at, attempted_at, heartbeat_at, finished_at, claimed_by)
VALUES ('k', 'default', '{}', 2, 'running',   2, $1, $1, $1, $1, NULL, 'dead/1'),  -- last attempt, stuck
       ('k', 'default', '{}', 3, 'running',   1, $1, $1, $1, $1, NULL, 'dead/1'),  -- stuck, retried
       ('k', 'default', '{}', 3, 'running',   1, $1, $1, $1, now(), NULL, 'live/1'), -- fresh heartbeat
       ('k', 'default', '{}', 3, 'completed', 1, $1, $1, $1, $1, $1, 'x'),        -- expired
       ('k', 'default', '{}', 3, 'failed',    3, $1, $1, $1, $1, $1, 'x'),        -- expired
       ('k', 'default', '{}', 3, 'completed', 1, $1, $1, $1, $1, now(), 'x')      -- kept`, old)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := leader.RunMaintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Leader || rep.Rescued != 1 || rep.RescuedFailed != 1 || rep.Deleted != 2 {
		t.Fatalf("report %+v, want leader, 1 rescued, 1 failed by rescue, 2 deleted", rep)
	}
	var states []string
	rows, _ := pool.Query(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs ORDER BY id`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		states = append(states, s)
	}
	if want := []string{"failed:2", "available:1", "running:1", "completed:1"}; !slices.Equal(states, want) {
		t.Fatalf("states after maintenance = %v, want %v", states, want)
	}
	// The leader's connection going away hands leadership over.
	if err := leader.close(ctx); err != nil {
		t.Fatal(err)
	}
	other := b1
	if leader == b1 {
		other = b2
	}
	eventually(t, 10*time.Second, "the other backend to lead", func() bool {
		r, err := other.RunMaintenance(ctx)
		return err == nil && r.Leader
	})
}

// TestRetryAndFailRecordErrors: a failed attempt is kept in the job's
// errors; a permanent failure leaves the job failed with its error.
func TestRetryAndFailRecordErrors(t *testing.T) {
	pool := newMigratedPool(t, 4)
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		if j.Attempt == 1 {
			return errors.New("first: " + strings.Repeat("é", 3000))
		}
		return jobs.Permanent(errors.New("second"))
	})
	b, err := NewPool(pool, Config{PollInterval: 20 * time.Millisecond}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 1, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
		b, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Stop(context.Background()) })
	r, err := c.Enqueue(context.Background(), plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var js []JobInfo
	eventually(t, 10*time.Second, "the job to fail for good", func() bool {
		js, err = b.Control().List(context.Background(), ListFilter{State: StateFailed})
		return err == nil && len(js) == 1
	})
	j := js[0]
	if j.ID != r.ID || j.Attempt != 2 || len(j.Errors) != 2 || j.FinishedAt == nil {
		t.Fatalf("failed job = %+v", j)
	}
	if e := j.Errors[0].Error; !strings.HasPrefix(e, "first: é") || len(e) > maxErrorLen+len("…") {
		t.Errorf("first error stored as %d bytes: %.40q…", len(e), e)
	}
	if e := j.Errors[1].Error; !strings.Contains(e, "second") || j.Errors[1].Attempt != 2 {
		t.Errorf("second error = %+v", j.Errors[1])
	}
}

// TestEnqueueTx: a standalone backend's EnqueueTx is part of the caller's
// transaction.
func TestEnqueueTx(t *testing.T) {
	pool := newMigratedPool(t, 4)
	c, _ := newClient(t, pool, Config{}, 1, nil)
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnqueueTx(ctx, shards.WrapTx(tx, nil), plainArgs{N: 7}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs`); n != 1 {
		t.Fatalf("%d jobs after one committed and one rolled-back enqueue, want 1", n)
	}
}

// TestInsertPlacedPlacesAsTheFunction: the enqueue sent as a statement of
// its own (sqlInsertPlaced) places every job as cellgate_jobs_insert
// does, the function older processes still call: the same place, or the
// same hold. Each insert runs both ways from the same state (a savepoint
// rolled back between them), through a head already past zero, tenants of
// weights 1 and 4, a capped tenant crossing its quota of places (and then
// held behind its held jobs), and a job coming due later.
func TestInsertPlacedPlacesAsTheFunction(t *testing.T) {
	pool := newMigratedPool(t, 2)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `
INSERT INTO cellgate_jobs_tenant_limits (tenant, max_running, weight, updated_at)
VALUES ('capped', 1, 2, now()), ('heavy', 0, 4, now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE cellgate_jobs_head SET vtime = 5 * 720720`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	type step struct {
		tenant string
		runAt  time.Time
	}
	var steps []step
	for range 3 {
		steps = append(steps, step{"plain", now}, step{"heavy", now})
	}
	steps = append(steps, step{"plain", now.Add(time.Hour)})
	for range 36 {
		steps = append(steps, step{"capped", now})
	}
	read := func(id int64) (p placed) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT vtime, held FROM cellgate_jobs WHERE id = $1`, id).Scan(&p.vtime, &p.held); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var held, future, places int
	for i, s := range steps {
		p := jobs.InsertParams{Kind: "k", Queue: "default", Tenant: s.tenant, EncodedArgs: []byte(`{}`), MaxAttempts: 5}
		if _, err := tx.Exec(ctx, `SAVEPOINT before`); err != nil {
			t.Fatal(err)
		}
		var id int64
		var dup bool
		sql, args := insertStatement(&p, nil, s.runAt, now)
		if err := tx.QueryRow(ctx, sql, args...).Scan(&id, &dup); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := read(id)
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT before`); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, sqlInsertOne, p.Kind, p.Queue, p.Tenant, p.EncodedArgs, int32(p.MaxAttempts), nil, s.runAt, now, priorityOf(&p)).Scan(&id, &dup); err != nil {
			t.Fatalf("step %d, through the function: %v", i, err)
		}
		want := read(id)
		if got.held != want.held || (got.vtime == nil) != (want.vtime == nil) || (got.vtime != nil && *got.vtime != *want.vtime) {
			t.Errorf("step %d (%s): statement placed %s, function %s", i, s.tenant, got, want)
		}
		switch {
		case want.held:
			held++
		case want.vtime == nil:
			future++
		default:
			places++
		}
	}
	// Every case the test means to cover came up.
	if held != 36-32 || future != 1 || places != len(steps)-held-future {
		t.Errorf("%d held, %d coming due, %d placed: the steps no longer cover what they should", held, future, places)
	}
}

// placed is a job's place and hold as TestInsertPlacedPlacesAsTheFunction
// reads them.
type placed struct {
	vtime *int64
	held  bool
}

func (p placed) String() string {
	switch {
	case p.held:
		return "held"
	case p.vtime == nil:
		return "unplaced"
	}
	return fmt.Sprintf("at %d", *p.vtime)
}

// TestCancelTx: a cancel in the caller's transaction holds if and only if
// the transaction commits.
func TestCancelTx(t *testing.T) {
	pool := newMigratedPool(t, 4)
	c, _ := newClient(t, pool, Config{}, 1, nil)
	ctx := context.Background()
	r, err := c.Enqueue(ctx, plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CancelTx(ctx, shards.WrapTx(tx, nil), r.ID); err != nil {
			t.Fatalf("CancelTx(commit=%v): %v", commit, err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "available"
		if commit {
			want = "failed"
		}
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM cellgate_jobs WHERE id = $1`, int64(r.ID)).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != want {
			t.Fatalf("after CancelTx and commit=%v the job is %s, want %s", commit, state, want)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := c.CancelTx(ctx, shards.WrapTx(tx, nil), r.ID); !errors.Is(err, jobs.ErrNotWaiting) {
		t.Errorf("CancelTx of a cancelled job = %v, want ErrNotWaiting", err)
	}
}

func TestConfig(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.Claim != ClaimFair || d.RescueAfter != 5*time.Minute || d.Retention != 24*time.Hour ||
		d.BreakerFailures != 5 || d.BreakerCooldown != 10*time.Second || d.PollInterval != time.Second {
		t.Errorf("defaults = %+v", d)
	}
	bad := Config{Claim: "lifo", RescueAfter: -1, BreakerFailures: -2, ClaimBatch: -1}
	err := bad.Validate()
	for _, field := range []string{"jobs.postgres.claim", "jobs.postgres.rescue_after", "jobs.postgres.breaker_failures", "jobs.postgres.claim_batch"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", bad, err, field)
		}
	}
	if _, err := NewPool(nil, Config{}, Options{}); err == nil {
		t.Error("NewPool(nil pool) succeeded")
	}
	if _, err := New(nil, Config{}, Options{}); err == nil {
		t.Error("New(nil set) succeeded")
	}
	got := FromConfig(config.JobsPostgres{ShardLocal: true, Claim: "fifo", RescueAfter: config.Duration(time.Second),
		Retention: config.Duration(time.Hour), BreakerFailures: 3, BreakerCooldown: config.Duration(time.Minute)})
	want := Config{ShardLocal: true, Claim: ClaimFIFO, RescueAfter: time.Second, Retention: time.Hour, BreakerFailures: 3, BreakerCooldown: time.Minute}
	if got != want {
		t.Errorf("FromConfig = %+v, want %+v", got, want)
	}
}

// TestClaimCostIgnoresBacklog: a claim's cost (buffers touched, from
// EXPLAIN) is the same with 100,000 jobs of one tenant as with 1,000, in
// every claim (FIFO, fair by turns, and fair by places as the previous
// release's processes claim), even with plans the session made while no
// job was available: claims walk indexes, never the backlog.
func TestClaimCostIgnoresBacklog(t *testing.T) {
	dsn := newDB(t)
	ctx := context.Background()
	buffers := func(pool *pgxpool.Pool, fair bool) int {
		t.Helper()
		return claimBuffers(t, pool, fair)
	}
	// A claim by turns: the noisy tenant's 27 turns and each quiet one's.
	turns := func(pool *pgxpool.Pool, backlog int) int {
		t.Helper()
		var turns []string
		for g := backlog + 1; g <= backlog+5; g++ {
			turns = append(turns, "noisy", fmt.Sprintf("quiet-%d", g))
		}
		for len(turns) < 32 {
			turns = append(turns, "noisy")
		}
		return turnsBuffers(t, pool, turns)
	}
	cost := map[int][3]int{}
	for _, backlog := range []int{1000, 100000} {
		// One connection, whose plans are made while no job is available,
		// as in a process that starts before the backlog builds up.
		pool := newSchema(t, dsn, 1)
		// Statistics of a drained queue (every job completed), what a
		// process finds after a quiet night: no job looks available.
		if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, state, attempt, run_at, created_at, finished_at)
SELECT 'k', 'default', 't' || (g % 100), '{}', 5, 'completed', 1, now(), now(), now() FROM generate_series(1, 2000) g`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `ANALYZE cellgate_jobs`); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			buffers(pool, true)
			buffers(pool, false)
			turns(pool, backlog)
		}
		// The backlog, then 5 quiet tenants' jobs, enqueued as the backend
		// does (placed in the fair order).
		if _, err := pool.Exec(ctx, `
SELECT count(*) FROM cellgate_jobs_insert_many(
    array_fill('k'::text, ARRAY[$1::int + 5]), array_fill('default'::text, ARRAY[$1::int + 5]),
    ARRAY(SELECT CASE WHEN g <= $1 THEN 'noisy' ELSE 'quiet-' || g END FROM generate_series(1, $1::int + 5) g),
    array_fill('{}'::text, ARRAY[$1::int + 5]), array_fill(5, ARRAY[$1::int + 5]),
    ARRAY(SELECT CASE WHEN g <= $1 THEN now() - interval '1 hour' ELSE now() END FROM generate_series(1, $1::int + 5) g),
    now(), array_fill(1::smallint, ARRAY[$1::int + 5]))`, backlog); err != nil {
			t.Fatal(err)
		}
		buffers(pool, true) // first claims touch the new pages' hint bits
		buffers(pool, false)
		turns(pool, backlog)
		cost[backlog] = [3]int{buffers(pool, true), buffers(pool, false), turns(pool, backlog)}
	}
	t.Logf("buffers per claim of 32 (places, fifo, turns): 1,000 backlog %v, 100,000 backlog %v", cost[1000], cost[100000])
	for i, mode := range []string{"places", "fifo", "turns"} {
		if small, big := cost[1000][i], cost[100000][i]; big > 2*small+50 {
			t.Errorf("%s claim touches %d buffers with a 100,000-job backlog, %d with 1,000: it grows with the backlog", mode, big, small)
		}
	}
}

// claimBuffers claims up to 32 jobs (fair or FIFO) under EXPLAIN (ANALYZE,
// BUFFERS) and returns the shared buffers the claim touched, its nested
// statements included.
func claimBuffers(t *testing.T, pool *pgxpool.Pool, fair bool) int {
	t.Helper()
	return planBuffers(t, pool, `
SELECT * FROM cellgate_jobs_claim(now(), 32, $1, '{}', '{}', 256, 'test', '{}', '{}', 256)`, fair)
}

// turnsBuffers is claimBuffers for a fair claim of up to 32 jobs on
// turns.
func turnsBuffers(t *testing.T, pool *pgxpool.Pool, turns []string) int {
	t.Helper()
	return planBuffers(t, pool, `
SELECT * FROM cellgate_jobs_claim_turns(now(), 32, $1, '{}', '{}', 'test', '{}', '{}', 256)`, turns)
}

// planBuffers runs sql under EXPLAIN (ANALYZE, BUFFERS) and returns the
// shared buffers it touched, its nested statements included.
func planBuffers(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	var plan []string
	rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)`+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range plan {
		if i := strings.Index(line, "Buffers: shared"); i >= 0 {
			for _, f := range strings.Fields(line[i+len("Buffers: shared"):]) {
				var n int
				if _, err := fmt.Sscanf(f, "hit=%d", &n); err == nil {
					total += n
				} else if _, err := fmt.Sscanf(f, "read=%d", &n); err == nil {
					total += n
				}
			}
			break // the top node's counts include the function's statements
		}
	}
	if total == 0 {
		t.Fatalf("no buffer counts in the plan:\n%s", strings.Join(plan, "\n"))
	}
	return total
}

// TestClaimStepsOverCappedBacklog: a tenant at its cap whose backlog was
// enqueued before the head of the fair order moved on (others' jobs were
// claimed meanwhile) neither blocks the other tenants' jobs nor makes the
// claim read its backlog: with 1,000 or 20,000 of its jobs waiting, a fair
// claim of 32 takes 32 jobs of the others and touches about as many
// buffers. (Before migration 000008 every place of the backlog stayed in
// front of the head: the claim's lookahead was all of it and it claimed
// nothing.)
func TestClaimStepsOverCappedBacklog(t *testing.T) {
	dsn := newDB(t)
	ctx := context.Background()
	cost := map[int]int{}
	for _, backlog := range []int{1000, 20000} {
		pool := newSchema(t, dsn, 1)
		if _, err := pool.Exec(ctx, `INSERT INTO cellgate_jobs_tenant_limits VALUES ('capped', 2, 1, now())`); err != nil {
			t.Fatal(err)
		}
		// The capped tenant's backlog, enqueued as the backend does.
		if _, err := pool.Exec(ctx, `
SELECT count(*) FROM cellgate_jobs_insert_many(
    array_fill('k'::text, ARRAY[$1::int]), array_fill('default'::text, ARRAY[$1::int]),
    array_fill('capped'::text, ARRAY[$1::int]), array_fill('{}'::text, ARRAY[$1::int]),
    array_fill(5, ARRAY[$1::int]), array_fill(now() - interval '1 minute', ARRAY[$1::int]), now(),
    array_fill(1::smallint, ARRAY[$1::int]))`, backlog); err != nil {
			t.Fatal(err)
		}
		// Its first two places are the first of the order: claiming two
		// puts it at its cap.
		var capped int
		if err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE job_tenant = 'capped')
FROM cellgate_jobs_claim(now(), 2, true, '{}', '{}', 256, 'test', '{}', '{}', 256)`).Scan(&capped); err != nil {
			t.Fatal(err)
		}
		if capped != 2 {
			t.Fatalf("backlog %d: the first claim of 2 took %d of the capped tenant's jobs, want 2", backlog, capped)
		}
		// Other tenants' jobs were served meanwhile, as many rounds as the
		// backlog is long: the head is past all of its places. Then 200
		// jobs of 4 other tenants join after it.
		if _, err := pool.Exec(ctx, `UPDATE cellgate_jobs_head SET vtime = ($1::bigint + 1) * 720720`, backlog); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
SELECT count(*) FROM cellgate_jobs_insert_many(
    array_fill('k'::text, ARRAY[200]), array_fill('default'::text, ARRAY[200]),
    ARRAY(SELECT 'other-' || g % 4 FROM generate_series(1, 200) g), array_fill('{}'::text, ARRAY[200]),
    array_fill(5, ARRAY[200]), array_fill(now() - interval '1 minute', ARRAY[200]), now(),
    array_fill(1::smallint, ARRAY[200]))`); err != nil {
			t.Fatal(err)
		}
		claimBuffers(t, pool, true) // first claims touch the new pages' hint bits
		cost[backlog] = claimBuffers(t, pool, true)
		var running, others int
		if err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE tenant = 'capped'), count(*) FILTER (WHERE tenant <> 'capped')
FROM cellgate_jobs WHERE state = 'running'`).Scan(&running, &others); err != nil {
			t.Fatal(err)
		}
		if running != 2 || others != 64 {
			t.Fatalf("backlog %d: after two claims of 32, %d of the capped tenant's jobs and %d of the others' run, want 2 and 64",
				backlog, running, others)
		}
	}
	t.Logf("buffers per fair claim of 32 beside a capped tenant's backlog: 1,000: %d, 20,000: %d", cost[1000], cost[20000])
	if small, big := cost[1000], cost[20000]; big > 2*small+50 {
		t.Errorf("a fair claim touches %d buffers beside a 20,000-job capped backlog, %d beside 1,000: it reads the backlog", big, small)
	}
}

// TestCancelNamesItsTable: the jobs tables of two schemas in one database
// share the cancellation channel, and their ids overlap. Cancelling the
// running job of one table cancels that job only, not the job of the
// same id running from the other table.
func TestCancelNamesItsTable(t *testing.T) {
	dsn := newDB(t)
	ctx := context.Background()
	type table struct {
		c      *jobs.Client
		id     jobs.JobID
		causes chan error
	}
	release := make(chan struct{})
	open := func() *table {
		tb := &table{causes: make(chan error, 1)}
		started := make(chan struct{})
		w := jobs.NewWorkers()
		jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
			close(started)
			select {
			case <-ctx.Done():
				tb.causes <- context.Cause(ctx)
			case <-release:
			}
			return ctx.Err()
		})
		tb.c, _ = newClient(t, newSchema(t, dsn, 4), Config{PollInterval: 50 * time.Millisecond}, 1, w)
		r, err := tb.c.Enqueue(ctx, plainArgs{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		tb.id = r.ID
		if err := tb.c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not start")
		}
		return tb
	}
	a, b := open(), open()
	t.Cleanup(func() { close(release) }) // before the clients stop
	if a.id != b.id {
		t.Fatalf("the tables' first jobs are %d and %d: the test needs one id in both", a.id, b.id)
	}
	cancelled := func(tb *table, within time.Duration) error {
		select {
		case cause := <-tb.causes:
			return cause
		case <-time.After(within):
			return nil
		}
	}
	if err := a.c.Cancel(ctx, a.id); err != nil {
		t.Fatal(err)
	}
	if cause := cancelled(a, 10*time.Second); !errors.Is(cause, jobs.ErrJobCancelled) {
		t.Fatalf("the cancelled job's cause = %v, want ErrJobCancelled", cause)
	}
	if cause := cancelled(b, 500*time.Millisecond); cause != nil {
		t.Fatalf("the other table's job %d was cancelled too: %v", b.id, cause)
	}
	if err := b.c.Cancel(ctx, b.id); err != nil {
		t.Fatal(err)
	}
	if cause := cancelled(b, 10*time.Second); !errors.Is(cause, jobs.ErrJobCancelled) {
		t.Fatalf("the other table's cancelled job's cause = %v, want ErrJobCancelled", cause)
	}
}

// TestParseCancel: a cancellation naming this table is ours, one naming
// another table is not, a bare id (a process of an earlier version) is
// taken as ours, and anything else is ignored.
func TestParseCancel(t *testing.T) {
	for _, tc := range []struct {
		payload string
		id      jobs.JobID
		ours    bool
	}{
		{"16384:42", 42, true},
		{"16385:42", 0, false},
		{"42", 42, true},
		{"16384:", 0, false},
		{"x:42", 0, false},
		{"99999999999:42", 0, false},
		{"", 0, false},
	} {
		id, ours := parseCancel(tc.payload, 16384)
		if id != tc.id || ours != tc.ours {
			t.Errorf("parseCancel(%q) = %d, %v; want %d, %v", tc.payload, id, ours, tc.id, tc.ours)
		}
	}
}
