package pgjobs

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

// The tenant-plans figures (docs/jobs-postgres.md, "Tenant caps, weights
// and priorities"), each printed as a line "plans: NAME=VALUE" for make
// bench-plans. Run them with -run '^$' -bench BenchmarkPlans -benchtime 1x;
// PLANS_SECONDS (default 10) sets the measured window of each figure
// except fair-caps-over-fifo, whose rounds last PGJOBS_BENCH_SECONDS
// (default 3); make bench-plans sets that from PLANS_SECONDS when given.

// benchPlanLimits gives the continuous benchmark's tenants plans: weights
// 1 to 4 and a cap of 2 running jobs each (none with PLANS_NOCAP set). A
// plans store answers from memory; the environment is read once, as
// reading it on every call (a lock and a lookup, several times per job)
// would charge the plans run with work no deployment does.
type benchPlanLimits struct{}

var benchPlansNoCap = os.Getenv("PLANS_NOCAP") != ""

func (benchPlanLimits) JobLimits(t string) (int, int) {
	if benchPlansNoCap {
		return 0, 1 + int(t[len(t)-1]-'0')%4
	}
	return 2, 1 + int(t[len(t)-1]-'0')%4
}

// mapLimits is a fixed per-tenant table; other tenants: no cap, weight 1.
type mapLimits map[string][2]int

func (m mapLimits) JobLimits(t string) (int, int) {
	if v, ok := m[t]; ok {
		return v[0], v[1]
	}
	return 0, 1
}

// BenchmarkPlansFairCapsOverFIFO is fair-caps-over-fifo: the continuous
// scenario of BenchmarkPostgresJobs with plans on (fair claims, every
// tenant capped at 2 running jobs, weights 1 to 4, priorities 1 to 4)
// against FIFO claims without plans. Each iteration runs
// PLANS_FAIR_PAIRS (default 5) pairs of rounds, one of each order, the
// order going first alternating, and the figure is the ratio of the mean
// rates: one round of each varies by a fifth or more on a shared 2-core
// machine (docs/jobs-postgres.md).
func BenchmarkPlansFairCapsOverFIFO(b *testing.B) {
	dsn := newMigratedDB(b)
	pool := newPool(b, dsn, "", 8)
	pairs := benchEnv("PLANS_FAIR_PAIRS", 5)
	var plans, fifo benchResult
	for range b.N * pairs {
		for k := range 2 {
			if _, err := pool.Exec(context.Background(), "TRUNCATE cellgate_jobs, cellgate_jobs_tenant_limits"); err != nil {
				b.Fatal(err)
			}
			name, mode, limits, sum := "fifo", ClaimFIFO, jobs.TenantLimits(nil), &fifo
			if (k+benchRound)%2 == 0 {
				name, mode, limits, sum = "plans", ClaimFair, benchPlanLimits{}, &plans
			}
			stmts := startStatements(b, pool)
			r := benchContinuous(b, pool, mode, limits)
			stmts.print(b, name, r.jobs)
			sum.add(r)
		}
		benchRound++
	}
	ratio := plans.rate / fifo.rate
	b.ReportMetric(plans.rate/float64(b.N*pairs), "plans-jobs/s")
	b.ReportMetric(fifo.rate/float64(b.N*pairs), "fifo-jobs/s")
	b.ReportMetric(ratio, "plans/fifo")
	plans.reportPerJob(b, "plans")
	fifo.reportPerJob(b, "fifo")
	fmt.Printf("plans: fair-caps-over-fifo=%.3f\n", ratio)
}

// statementTimes reads where PostgreSQL spent a round's time, by
// statement, when PGJOBS_BENCH_STATEMENTS is set: the statements of the
// benchmark's database in pg_stat_statements, which the server must load
// (shared_preload_libraries) and track nested (pg_stat_statements.track =
// all, so the statements inside the claim and enqueue functions are
// counted on their own too), with the extension created in template1 so
// the test database has it. Unset, it does nothing.
type statementTimes struct{ pool *pgxpool.Pool }

// startStatements forgets the statements timed so far, so the next read
// covers one round.
func startStatements(b *testing.B, pool *pgxpool.Pool) statementTimes {
	if os.Getenv("PGJOBS_BENCH_STATEMENTS") == "" {
		return statementTimes{}
	}
	if _, err := pool.Exec(context.Background(), "SELECT pg_stat_statements_reset()"); err != nil {
		b.Fatalf("PGJOBS_BENCH_STATEMENTS needs pg_stat_statements loaded and created in the database: %v", err)
	}
	return statementTimes{pool}
}

// print writes the round's costliest statements, in µs of execution time
// per job run in the round's window. A function's time includes its
// nested statements'. The statements of the round's start and stop (the
// backend's setup, the claims that drain it) are counted as well, so the
// figures are slightly above the window's own.
func (s statementTimes) print(b *testing.B, mode string, jobs int64) {
	if s.pool == nil || jobs == 0 {
		return
	}
	rows, err := s.pool.Query(context.Background(), `
SELECT calls, total_exec_time, toplevel, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 16`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	fmt.Printf("statements (%s, %d jobs): µs/job, calls, nested, statement\n", mode, jobs)
	for rows.Next() {
		var calls int64
		var ms float64
		var top bool
		var q string
		if err := rows.Scan(&calls, &ms, &top, &q); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("  %7.1f %7d %-5v %s\n", ms*1000/float64(jobs), calls, !top, q)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPlansWeightedShare is weighted-share-error: two backlogged
// tenants of weights 1 and 4, 4 workers, jobs of equal cost (2 ms), for
// PLANS_SECONDS: |completions of the weight-4 tenant / those of the
// weight-1 tenant / 4 - 1|.
func BenchmarkPlansWeightedShare(b *testing.B) {
	window := time.Duration(benchEnv("PLANS_SECONDS", 10)) * time.Second
	dsn := newMigratedDB(b)
	pool := newPool(b, dsn, "", 8)
	var worst float64
	for range b.N {
		if _, err := pool.Exec(context.Background(), "TRUNCATE cellgate_jobs, cellgate_jobs_tenant_limits"); err != nil {
			b.Fatal(err)
		}
		var one, four atomic.Int64
		var measuring atomic.Bool
		be, err := NewPool(pool, Config{}, Options{Logger: quietLogger(), Limits: mapLimits{"w1": {0, 1}, "w4": {0, 4}}})
		if err != nil {
			b.Fatal(err)
		}
		w := jobs.NewWorkers()
		jobs.Register(w, func(ctx context.Context, j *jobs.Job[benchArgs]) error {
			time.Sleep(2 * time.Millisecond)
			if measuring.Load() {
				if j.Tenant == "w4" {
					four.Add(1)
				} else {
					one.Add(1)
				}
			}
			return nil
		})
		c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 4}, be, w, jobs.Options{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		// More of each than 4 workers run in the window: both stay
		// backlogged throughout.
		n := int(window/(2*time.Millisecond))*4 + 1000
		enqueueBacklog(b, c, "w1", n)
		enqueueBacklog(b, c, "w4", n)
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // past the start
		measuring.Store(true)
		time.Sleep(window)
		measuring.Store(false)
		if _, err := c.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		if one.Load() == 0 {
			b.Fatalf("the weight-1 tenant completed nothing (weight 4: %d)", four.Load())
		}
		e := math.Abs(float64(four.Load())/float64(one.Load())/4 - 1)
		b.Logf("weight 4: %d, weight 1: %d completions", four.Load(), one.Load())
		worst = max(worst, e)
	}
	b.ReportMetric(worst, "share-error")
	fmt.Printf("plans: weighted-share-error=%.3f\n", worst)
}

// enqueueBacklog enqueues n jobs of tenant in batches.
func enqueueBacklog(b *testing.B, c *jobs.Client, tenantID string, n int) {
	ctx := tenant.With(context.Background(), tenantID)
	for n > 0 {
		k := min(n, 1000)
		args := make([]jobs.Args, k)
		for i := range args {
			args[i] = benchArgs{N: i}
		}
		if _, err := c.EnqueueMany(ctx, args); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// cappedJobTime is how long each of the capped tenant's jobs runs in
// BenchmarkPlansCapViolations: a tenant with slow jobs, the one a cap is
// for. With short jobs the capped tenant's own claims and completions
// would be a tenth of the run's work (capped-share), which the run without
// it does not do, so the ratio would measure that work, not the cap.
const cappedJobTime = 50 * time.Millisecond

// capWorkers is each process's workers in BenchmarkPlansCapViolations.
// The capped tenant's two running jobs hold two of them for as long as
// they run, which is its due and not a cost of the cap. With 8 per
// process (16 in all) the others had 14 left and their claims shrank in
// proportion (7.0 jobs a claim against 7.9 without the capped tenant),
// so the ratio measured those two workers as much as the cap. With 32
// each, the capped tenant holds 2 of 64.
const capWorkers = 32

// capPairs is how many runs with and without the capped tenant
// BenchmarkPlansCapViolations alternates in each iteration: one 10 s run
// of either varies by a fifth on a shared 2-core machine.
const capPairs = 3

// BenchmarkPlansCapViolations is cap-violations: a tenant capped at 2
// running jobs (each cappedJobTime) and four uncapped tenants (no-op
// jobs), all backlogged, claimed by two processes (two backends, two
// pools) with capWorkers workers each from one database. The capped
// tenant's jobs count how many of them run at once, inside the handler;
// cap-violations is the number of job starts that found more than 2
// running. cap-others-throughput is the other tenants' completions per
// second over a run without the capped tenant, capPairs runs of each
// alternating.
func BenchmarkPlansCapViolations(b *testing.B) {
	window := time.Duration(benchEnv("PLANS_SECONDS", 10)) * time.Second
	dsn := newMigratedDB(b)
	pools := [2]*pgxpool.Pool{newPool(b, dsn, "", 8), newPool(b, dsn, "", 8)}
	lim := mapLimits{"capped": {2, 1}}
	var violations, peak int64
	var with, without float64
	var withCPU, withoutCPU benchResult
	var othersWith int64 // the uncapped tenants' jobs run in the with-windows
	for range b.N * capPairs {
		for k := range 2 {
			capped := (k+benchRound)%2 == 0
			v, p, rate, cpu := capRun(b, pools, lim, capped, window)
			if capped {
				violations += v
				peak = max(peak, p)
				with += rate
				withCPU.add(cpu)
				othersWith += int64(math.Round(rate * window.Seconds()))
			} else {
				without += rate
				withoutCPU.add(cpu)
			}
		}
		benchRound++
	}
	ratio := with / without
	b.ReportMetric(float64(violations), "violations")
	b.ReportMetric(float64(peak), "peak-running")
	b.ReportMetric(ratio, "others-with/without")
	// PostgreSQL CPU per job run (all tenants') is steadier than the rates
	// on a shared machine.
	if withCPU.jobs > 0 && withoutCPU.jobs > 0 && withCPU.pgCPU > 0 {
		b.ReportMetric(float64(withCPU.pgCPU.Microseconds())/float64(withCPU.jobs), "with-pg-µs/job")
		b.ReportMetric(float64(withoutCPU.pgCPU.Microseconds())/float64(withoutCPU.jobs), "without-pg-µs/job")
		// The capped tenant's own jobs are work the run without it does
		// not do, and they are claimed in the same claims as the others':
		// where claims or PostgreSQL's CPU are the limit, they take
		// capped-share (their part of the jobs run) from the others
		// however cheap stepping over the cap is.
		b.ReportMetric(1-float64(othersWith)/float64(withCPU.jobs), "capped-share")
	}
	fmt.Printf("plans: cap-violations=%d\n", violations)
	fmt.Printf("plans: cap-others-throughput=%.3f\n", ratio)
}

// capRun is one run of BenchmarkPlansCapViolations: it returns the
// violations, the capped tenant's peak running jobs, the other tenants'
// completions per second, and the PostgreSQL CPU and jobs run (all
// tenants') in the window.
func capRun(b *testing.B, pools [2]*pgxpool.Pool, lim jobs.TenantLimits, withCapped bool, window time.Duration) (violations, peak int64, rate float64, cpu benchResult) {
	if _, err := pools[0].Exec(context.Background(), "TRUNCATE cellgate_jobs, cellgate_jobs_tenant_limits"); err != nil {
		b.Fatal(err)
	}
	var running, others, othersDone, othersQueued, all atomic.Int64
	var mu sync.Mutex
	var measuring atomic.Bool
	handler := func(ctx context.Context, j *jobs.Job[benchArgs]) error {
		if measuring.Load() {
			all.Add(1)
		}
		if j.Tenant != "capped" {
			othersDone.Add(1)
			if measuring.Load() {
				others.Add(1)
			}
			return nil
		}
		n := running.Add(1)
		mu.Lock()
		peak = max(peak, n)
		if n > 2 {
			violations++
		}
		mu.Unlock()
		time.Sleep(cappedJobTime)
		running.Add(-1)
		return nil
	}
	var clients []*jobs.Client
	for _, pool := range pools {
		be, err := NewPool(pool, Config{}, Options{Logger: quietLogger(), Limits: lim})
		if err != nil {
			b.Fatal(err)
		}
		w := jobs.NewWorkers()
		jobs.Register(w, handler)
		c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: capWorkers}, be, w, jobs.Options{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		clients = append(clients, c)
	}
	if withCapped {
		enqueueBacklog(b, clients[0], "capped", int(window/cappedJobTime)*2+1000)
	}
	// Kept backlogged: producers top the other tenants up to about 4,000
	// waiting jobs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				if othersQueued.Load()-othersDone.Load() > 4000 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				enqueueBacklog(b, c, fmt.Sprintf("other-%d", i), 250)
				othersQueued.Add(250)
			}
		}()
	}
	for _, c := range clients {
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	meter := startCPU(pools[0])
	measuring.Store(true)
	time.Sleep(window)
	measuring.Store(false)
	meter.stop(&cpu)
	cpu.jobs = all.Load()
	rate = float64(others.Load()) / window.Seconds()
	close(stop)
	wg.Wait()
	for _, c := range clients {
		if _, err := c.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return violations, peak, rate, cpu
}
