package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/jobstest"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

type welcomeArgs struct {
	Email string `json:"email"`
}

func (welcomeArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "send_welcome"} }

// TestSignupsEnqueueAtomically: 10,000 sign-ups, each an account INSERT
// and an EnqueueTx in one shard transaction, randomly committed or rolled
// back from several goroutines. Afterwards every shard holds a welcome job
// for exactly the committed accounts, and the shard workers run them all.
func TestSignupsEnqueueAtomically(t *testing.T) {
	const signups, goroutines, tenants = 10000, 16, 64
	c := newCell(t, 2, 10)
	var ran sync.Map // email → runs
	var runs atomic.Int64
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[welcomeArgs]) error {
		if tn, _ := tenant.From(ctx); tn != j.Tenant || tn == "" {
			return fmt.Errorf("job of tenant %q ran with tenant %q in ctx", j.Tenant, tn)
		}
		n, _ := ran.LoadOrStore(j.Args.Email, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		runs.Add(1)
		return nil
	})
	r, err := newRuntime(context.Background(), c.set, Config{ShardLocal: true, PollInterval: 50 * time.Millisecond},
		jobs.Config{Workers: 8}, w, jobs.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })

	// Before Start no shard table exists: an in-transaction enqueue says so.
	sh0 := c.set.Shards()[0]
	err = sh0.Tx(context.Background(), func(tx shards.Tx) error {
		_, err := r.EnqueueTx(tenant.With(context.Background(), "early"), tx, welcomeArgs{Email: "early@x"})
		return err
	})
	if !errors.Is(err, ErrShardJobsNotReady) {
		t.Fatalf("EnqueueTx before the shard is migrated: %v, want ErrShardJobsNotReady", err)
	}

	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r)

	var committed sync.Map // email → tenant
	var nCommitted, nRolledBack atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := g; i < signups; i += goroutines {
				ten := fmt.Sprintf("tenant-%02d", rng.IntN(tenants))
				email := fmt.Sprintf("user%05d@%s.example", i, ten)
				commit := rng.IntN(2) == 0
				ctx := tenant.With(context.Background(), ten)
				sh, slot, err := c.set.ForTenant(ten)
				if err != nil {
					errc <- err
					return
				}
				tx, err := sh.Pool.Begin(ctx)
				if err != nil {
					errc <- err
					return
				}
				_, err = tx.Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, $3)`, ten, slot, email)
				if err == nil {
					_, err = r.EnqueueTx(ctx, shards.WrapTx(tx, sh), welcomeArgs{Email: email})
				}
				if err != nil {
					_ = tx.Rollback(ctx)
					errc <- fmt.Errorf("sign-up %d: %w", i, err)
					return
				}
				if commit {
					if err := tx.Commit(ctx); err != nil {
						errc <- err
						return
					}
					committed.Store(email, ten)
					nCommitted.Add(1)
				} else {
					if err := tx.Rollback(ctx); err != nil {
						errc <- err
						return
					}
					nRolledBack.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d sign-ups (%d committed, %d rolled back) in %s", signups, nCommitted.Load(), nRolledBack.Load(), time.Since(start))

	// Each shard: the welcome jobs are exactly the committed accounts, with
	// the account's tenant, and on the tenant's shard.
	ctx := context.Background()
	total := 0
	for _, sh := range c.set.Shards() {
		rows, err := sh.Pool.Query(ctx, `
SELECT a.email, a.tenant_id, j.tenant, j.args->>'email'
FROM accounts a FULL JOIN cellgate_jobs j ON j.args->>'email' = a.email AND j.kind = 'send_welcome'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var aEmail, aTenant, jTenant, jEmail *string
			if err := rows.Scan(&aEmail, &aTenant, &jTenant, &jEmail); err != nil {
				t.Fatal(err)
			}
			switch {
			case aEmail == nil:
				t.Errorf("%s: job for %s has no account (its transaction rolled back)", sh.Name, *jEmail)
			case jEmail == nil:
				t.Errorf("%s: account %s has no welcome job", sh.Name, *aEmail)
			case *aTenant != *jTenant:
				t.Errorf("%s: job of %s has tenant %q, account %q", sh.Name, *aEmail, *jTenant, *aTenant)
			default:
				ten, ok := committed.Load(*aEmail)
				if !ok || ten != *aTenant {
					t.Errorf("%s: account %s was not committed by the test", sh.Name, *aEmail)
				}
				if want, _, _ := c.set.ForTenant(*aTenant); want.Name != sh.Name {
					t.Errorf("account %s of %s is on %s, want %s", *aEmail, *aTenant, sh.Name, want.Name)
				}
				total++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if int64(total) != nCommitted.Load() {
		t.Fatalf("%d account/job pairs, want %d committed sign-ups", total, nCommitted.Load())
	}
	if n := count(t, c.set.Control(), `SELECT count(*) FROM cellgate_jobs`); n != 0 {
		t.Errorf("control database holds %d jobs, want 0 (shard-local enqueues)", n)
	}

	// The shard workers run every committed welcome exactly once.
	eventually(t, 30*time.Second, "every welcome job to run", func() bool { return runs.Load() >= nCommitted.Load() })
	committed.Range(func(k, _ any) bool {
		n, ok := ran.Load(k)
		if !ok || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("welcome of %s ran %v times, want 1", k, n)
		}
		return true
	})
	for _, sh := range c.set.Shards() {
		eventually(t, 10*time.Second, "completions written", func() bool {
			return count(t, sh.Pool, `SELECT count(*) FROM cellgate_jobs WHERE state <> 'completed'`) == 0
		})
	}
}

// TestControlDatabaseDown: with the control database unreachable, shard
// workers keep completing shard jobs; plain enqueues fail until the
// breaker opens, which then rejects them at once; once the database is back
// the half-open probe after the cooldown closes it.
func TestControlDatabaseDown(t *testing.T) {
	c := newCell(t, 1, 4)
	reg := prometheus.NewRegistry()
	clock := jobstest.NewFakeClock(time.Now())
	var done atomic.Int64
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[welcomeArgs]) error {
		done.Add(1)
		return nil
	})
	r, err := newRuntime(context.Background(), c.set,
		Config{ShardLocal: true, PollInterval: 50 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: time.Minute},
		jobs.Config{Workers: 2}, w, jobs.Options{Logger: quietLogger(), Registry: reg, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r)
	sh := c.set.Shards()[0]
	ctx := tenant.With(context.Background(), "acme")
	enqueueShard := func(email string) {
		t.Helper()
		err := sh.Tx(ctx, func(tx shards.Tx) error {
			_, err := r.EnqueueTx(ctx, tx, welcomeArgs{Email: email})
			return err
		})
		if err != nil {
			t.Fatalf("EnqueueTx: %v", err)
		}
	}
	enqueueShard("before@x")
	if _, err := r.Enqueue(ctx, welcomeArgs{Email: "control@x"}); err != nil {
		t.Fatalf("plain Enqueue while the control database is up: %v", err)
	}
	eventually(t, 10*time.Second, "both jobs to run", func() bool { return done.Load() == 2 })

	// Take the control database away.
	ctrl := dbName(t, c.dsns["control"])
	adminExec(t, "ALTER DATABASE "+ctrl+" ALLOW_CONNECTIONS false")
	t.Cleanup(func() { adminExec(t, "ALTER DATABASE "+ctrl+" ALLOW_CONNECTIONS true") })
	adminExec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+ctrl+"'")

	// Shard work goes on.
	for i := range 20 {
		enqueueShard(fmt.Sprintf("during%d@x", i))
	}
	eventually(t, 10*time.Second, "shard jobs to run with the control database down", func() bool { return done.Load() == 22 })

	// Plain enqueues fail, then the breaker opens and rejects fast.
	var failures, rejections int
	for range 6 {
		_, err := r.Enqueue(ctx, welcomeArgs{Email: "lost@x"})
		switch {
		case errors.Is(err, ErrBreakerOpen):
			rejections++
		case err != nil:
			failures++
		default:
			t.Fatal("plain Enqueue succeeded with the control database down")
		}
	}
	if failures != 3 || rejections != 3 {
		t.Fatalf("%d failures and %d rejections, want 3 failures (breaker_failures) then 3 rejections", failures, rejections)
	}
	if got := testutil.ToFloat64(r.Control().brk.state); got != breakerOpen {
		t.Errorf("cellgate_jobs_breaker_state = %v, want %d (open)", got, breakerOpen)
	}
	if got := testutil.ToFloat64(r.Control().brk.rejects); got != 3 {
		t.Errorf("cellgate_jobs_breaker_rejections_total = %v, want 3", got)
	}
	t0 := time.Now()
	if _, err := r.Enqueue(ctx, welcomeArgs{Email: "fast@x"}); !errors.Is(err, ErrBreakerOpen) || time.Since(t0) > 50*time.Millisecond {
		t.Errorf("enqueue while open: %v after %s, want ErrBreakerOpen at once", err, time.Since(t0))
	}
	// An in-transaction enqueue does not use the breaker.
	enqueueShard("tx-while-open@x")
	eventually(t, 10*time.Second, "the shard job enqueued while the breaker is open", func() bool { return done.Load() == 23 })

	// Bring the database back: after the cooldown one probe closes the breaker.
	adminExec(t, "ALTER DATABASE "+ctrl+" ALLOW_CONNECTIONS true")
	clock.Advance(time.Minute)
	eventually(t, 10*time.Second, "the probe to succeed", func() bool {
		_, err := r.Enqueue(ctx, welcomeArgs{Email: "back@x"})
		return err == nil
	})
	if st := r.Control().BreakerState(); st != breakerClosed {
		t.Errorf("breaker state after a good probe = %d, want closed", st)
	}
	eventually(t, 15*time.Second, "the control job to run after recovery", func() bool { return done.Load() == 24 })

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	var ready float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "cellgate_jobs_database_ready" {
			for _, m := range mf.GetMetric() {
				ready += m.GetGauge().GetValue()
			}
		}
	}
	if ready != 2 {
		t.Errorf("cellgate_jobs_database_ready sums to %v, want 2 (control and shard-0)", ready)
	}
}

// TestCellListAndStats: the databases' job listings and the queue depth
// cover the control database and every shard.
func TestCellListAndStats(t *testing.T) {
	c := newCell(t, 2, 3)
	reg := prometheus.NewRegistry()
	r, err := newRuntime(context.Background(), c.set, Config{ShardLocal: true}, jobs.Config{Workers: 1}, nil,
		jobs.Options{Logger: quietLogger(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	// Migrate without starting workers, so the jobs stay waiting.
	if got := len(r.NotReady()); got != 3 {
		t.Fatalf("before Migrate %d databases are not ready, want 3", got)
	}
	if err := r.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if nr := r.NotReady(); len(nr) != 0 {
		t.Fatalf("after Migrate %v are not ready", nr)
	}
	ctx := context.Background()
	if _, err := r.Enqueue(tenant.With(ctx, "ctl"), welcomeArgs{Email: "c@x"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"control": 1}
	for i := range 6 {
		ten := fmt.Sprintf("t%d", i)
		tctx := tenant.With(ctx, ten)
		sh, _, _ := c.set.ForTenant(ten)
		err := sh.Tx(tctx, func(tx shards.Tx) error {
			_, err := r.EnqueueTx(tctx, tx, welcomeArgs{Email: ten + "@x"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want[sh.Name]++
	}
	var all []JobInfo
	for _, db := range r.Databases() {
		js, err := db.List(ctx, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, js...)
	}
	got := map[string]int{}
	for _, j := range all {
		got[j.Database]++
		if j.State != StateAvailable || j.Kind != "send_welcome" || j.Attempt != 0 || len(j.Errors) != 0 {
			t.Errorf("listed job %+v, want an available send_welcome job", j)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("jobs per database = %v, want %v", got, want)
	}
	sh, _, _ := c.set.ForTenant("t3")
	one, err := r.Shard(sh.Name).List(ctx, ListFilter{Tenant: "t3", Limit: 5})
	if err != nil || len(one) != 1 || one[0].Tenant != "t3" || one[0].Database != sh.Name {
		t.Errorf("List(tenant t3) on %s = %+v, %v", sh.Name, one, err)
	}
	if v := testutil.ToFloat64(collectorOf(t, reg, "cellgate_jobs_queue_depth")); v != 7 {
		t.Errorf("cellgate_jobs_queue_depth = %v, want 7 (control + shards)", v)
	}
}

// collectorOf gathers one metric family from reg as a collector, for
// testutil.ToFloat64.
func collectorOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return gatheredCollector{t: t, reg: reg, name: name}
}

type gatheredCollector struct {
	t    *testing.T
	reg  *prometheus.Registry
	name string
}

func (g gatheredCollector) Describe(chan<- *prometheus.Desc) {}

func (g gatheredCollector) Collect(ch chan<- prometheus.Metric) {
	mfs, err := g.reg.Gather()
	if err != nil {
		g.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != g.name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "sum", nil, nil), prometheus.GaugeValue, sum)
	}
}

// TestRuntimeStopsRetryingFailedMigration: a migration that failed in a
// database (a *dbmigrate.Error) is not retried; MigrationFailures reports
// it and the database stays not ready, while the others come up.
func TestRuntimeStopsRetryingFailedMigration(t *testing.T) {
	c := newCell(t, 1, 3)
	r, err := newRuntime(context.Background(), c.set, Config{ShardLocal: true}, jobs.Config{Workers: 1}, nil, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	var calls atomic.Int32
	failure := &dbmigrate.Error{Table: MigrationsTable, Version: 1, File: "000001_jobs.up.sql", Previous: -1, Err: errors.New("boom")}
	r.migrate = func(ctx context.Context, dsn string) error {
		if dsn == c.dsns["shard-0"] {
			calls.Add(1)
			return failure
		}
		return Migrate(ctx, dsn)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the failure to be recorded", func() bool { return r.MigrationFailures()["shard-0"] != nil })
	eventually(t, 10*time.Second, "control to be ready", func() bool { return len(r.NotReady()) == 1 })
	time.Sleep(500 * time.Millisecond) // the first retry would come after 200ms
	if n := calls.Load(); n != 1 {
		t.Fatalf("a failed migration was tried %d times, want 1", n)
	}
	if nr := r.NotReady(); len(nr) != 1 || nr[0] != "shard-0" {
		t.Fatalf("NotReady = %v, want [shard-0]", nr)
	}
}
