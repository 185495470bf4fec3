package pgjobs

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "bench_noop"} }

// Benchmark sizes, overridable for quick runs.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const (
	benchWorkers     = 32
	benchProducers   = 64
	benchTenants     = 100
	benchOutstanding = 2000
)

// benchRound alternates which claim order goes first in an iteration, over
// the iterations of a run (-count), so neither always runs on a warmer or a
// quieter machine.
var benchRound int

// BenchmarkPostgresJobs measures end-to-end throughput (enqueue, claim, run a
// no-op handler, complete) of one DB with 32 workers:
//
//   - continuous: 64 producers enqueue, each job with its own Enqueue call
//     (plain enqueues, coalesced by the backend), round-robin over 100
//     tenants, while the workers work, for PGJOBS_BENCH_SECONDS (default 3);
//     producers pause while 2,000 jobs are enqueued and not yet run, so
//     jobs/s is the rate the system sustains, enqueue and work together;
//   - backlog: the workers drain PGJOBS_BENCH_BACKLOG (default 200000)
//     pre-inserted jobs, half of them from one noisy tenant.
//
// Every iteration runs the scenario with fair claims and with FIFO claims,
// one right after the other, and the benchmark reports both rates and their
// ratio (fair/fifo), so the ratio compares runs on the same machine state.
// Run with -benchtime=1x and -count=3 or more.
func BenchmarkPostgresJobs(b *testing.B) {
	dsn := newMigratedDB(b)
	for _, scenario := range []string{"continuous", "backlog"} {
		b.Run(scenario, func(b *testing.B) {
			pool := newPool(b, dsn, "", 8)
			var sum [2]benchResult // fair, fifo
			for range b.N {
				modes := [2]ClaimMode{ClaimFair, ClaimFIFO}
				for k := range 2 {
					i := (k + benchRound) % 2
					r := benchOnce(b, pool, scenario, modes[i])
					sum[i].add(r)
				}
				benchRound++
			}
			fair, fifo := sum[0], sum[1]
			b.ReportMetric(fair.rate/float64(b.N), "fair-jobs/s")
			b.ReportMetric(fifo.rate/float64(b.N), "fifo-jobs/s")
			b.ReportMetric(fair.rate/fifo.rate, "fair/fifo")
			fair.reportPerJob(b, "fair")
			fifo.reportPerJob(b, "fifo")
		})
	}
}

// benchOnce runs one scenario in one claim order on an empty table.
func benchOnce(b *testing.B, pool *pgxpool.Pool, scenario string, mode ClaimMode) benchResult {
	if _, err := pool.Exec(context.Background(), "TRUNCATE cellgate_jobs"); err != nil {
		b.Fatal(err)
	}
	if scenario == "continuous" {
		return benchContinuous(b, pool, mode, nil)
	}
	return benchBacklog(b, pool, mode)
}

// benchClient returns a Client over a new DB whose no-op handler counts
// the jobs it runs in done and, if slots is not nil, frees one of them per
// job.
func benchClient(b *testing.B, pool *pgxpool.Pool, mode ClaimMode, done *atomic.Int64, slots chan struct{}, limits jobs.TenantLimits) (*jobs.Client, *DB) {
	b.Helper()
	cfg := Config{Claim: mode}
	be, err := NewPool(pool, cfg, Options{Logger: quietLogger(), Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(context.Context, *jobs.Job[benchArgs]) error {
		done.Add(1)
		if slots != nil {
			<-slots
		}
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: benchWorkers}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return c, be.Control()
}

// benchResult is one measured run, or the sum of several.
type benchResult struct {
	rate         float64 // jobs/s
	jobs         int64
	pgCPU, goCPU time.Duration
	allocs       uint64 // heap allocations of this process
	claims       uint64 // claim statements
	claimed      uint64 // jobs they returned
	inserts      uint64 // plain-enqueue statements
	inserted     uint64 // jobs they wrote
}

// reportPerJob reports r's costs per job run, each metric named after
// name: CPU per job is steadier than jobs/s on a shared machine,
// PostgreSQL's (this database's backends, from /proc) and this
// process's; and the jobs per claim and per enqueue statement.
func (r benchResult) reportPerJob(b *testing.B, name string) {
	if r.jobs == 0 {
		return
	}
	if r.pgCPU > 0 {
		b.ReportMetric(float64(r.pgCPU.Microseconds())/float64(r.jobs), name+"-pg-µs/job")
	}
	b.ReportMetric(float64(r.goCPU.Microseconds())/float64(r.jobs), name+"-go-µs/job")
	b.ReportMetric(float64(r.allocs)/float64(r.jobs), name+"-allocs/job")
	if r.claims > 0 {
		b.ReportMetric(float64(r.claimed)/float64(r.claims), name+"-jobs/claim")
	}
	if r.inserts > 0 {
		b.ReportMetric(float64(r.inserted)/float64(r.inserts), name+"-jobs/insert")
	}
}

func (r *benchResult) add(o benchResult) {
	r.rate += o.rate
	r.jobs += o.jobs
	r.pgCPU += o.pgCPU
	r.goCPU += o.goCPU
	r.allocs += o.allocs
	r.claims += o.claims
	r.claimed += o.claimed
	r.inserts += o.inserts
	r.inserted += o.inserted
}

// roundTrips copies be's claim and insert counters into r.
func (r *benchResult) roundTrips(be *DB) {
	be.mu.Lock()
	r.claims, r.claimed = be.claims, be.claimed
	be.mu.Unlock()
	r.inserts, r.inserted = be.inserts.Load(), be.insertedJobs.Load()
}

// cpuMeter measures the CPU time of this process and of the PostgreSQL
// backends serving the benchmark's database (read from /proc, so only when
// the server runs on this machine; otherwise pg stays 0), and this
// process's heap allocations.
type cpuMeter struct {
	pool    *pgxpool.Pool
	goStart time.Duration
	pgStart map[int]time.Duration
	mallocs uint64
}

func startCPU(pool *pgxpool.Pool) *cpuMeter {
	m := &cpuMeter{pool: pool, goStart: processCPU(), mallocs: mallocs()}
	m.pgStart = m.backends()
	return m
}

// stop ends the measurement of r's run: it fills r's CPU times and
// allocations.
func (m *cpuMeter) stop(r *benchResult) {
	r.allocs = mallocs() - m.mallocs
	r.goCPU = processCPU() - m.goStart
	for pid, t := range m.backends() {
		r.pgCPU += t - m.pgStart[pid]
	}
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// backends returns the CPU time of every backend connected to the pool's
// database, by pid.
func (m *cpuMeter) backends() map[int]time.Duration {
	out := map[int]time.Duration{}
	rows, err := m.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return out
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): utime is
		// the 14th field, stime the 15th, in clock ticks (100 Hz).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(u+st) * 10 * time.Millisecond
	}
	return out
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// planPrioEvery: with plans, one enqueue in PLANS_PRIO_EVERY (default 4)
// of each producer gets priority 2, 3 or 4 (cycling), the others the
// default, 1. 1 means every job has priority 2 to 4, 0 none.
var planPrioEvery = func() int {
	if v, err := strconv.Atoi(os.Getenv("PLANS_PRIO_EVERY")); err == nil && v >= 0 {
		return v
	}
	return 4
}()

// benchContinuous runs the continuous scenario. With plans (per-tenant
// limits), some enqueues have priorities after 1 (planPrioEvery).
func benchContinuous(b *testing.B, pool *pgxpool.Pool, mode ClaimMode, plans jobs.TenantLimits) benchResult {
	window := time.Duration(benchEnv("PGJOBS_BENCH_SECONDS", 3)) * time.Second
	var done atomic.Int64
	// A producer takes a slot before each enqueue and the handler frees it
	// once the job ran: producers wait while benchOutstanding jobs are
	// enqueued and not yet run.
	slots := make(chan struct{}, benchOutstanding)
	c, be := benchClient(b, pool, mode, &done, slots, plans)
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	ctxs := make([]context.Context, benchTenants)
	for i := range ctxs {
		ctxs[i] = tenant.With(context.Background(), fmt.Sprintf("tenant-%03d", i))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var enqErr atomic.Value
	cpu := startCPU(pool)
	start := time.Now()
	for p := range benchProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case slots <- struct{}{}:
				}
				var err error
				// The last of every planPrioEvery: a large one gives none
				// at all, not one per producer at its start.
				if plans != nil && planPrioEvery > 0 && i%planPrioEvery == planPrioEvery-1 {
					_, err = c.Enqueue(ctxs[(p*7+i)%benchTenants], benchArgs{N: i}, jobs.WithPriority(2+(i/planPrioEvery)%3))
				} else {
					_, err = c.Enqueue(ctxs[(p*7+i)%benchTenants], benchArgs{N: i})
				}
				if err != nil {
					enqErr.Store(err)
					return
				}
			}
		}()
	}
	time.Sleep(window)
	n := done.Load()
	elapsed := time.Since(start)
	r := benchResult{rate: float64(n) / elapsed.Seconds(), jobs: n}
	cpu.stop(&r)
	r.roundTrips(be)
	close(stop)
	wg.Wait()
	if err, _ := enqErr.Load().(error); err != nil {
		b.Fatalf("Enqueue: %v", err)
	}
	if _, err := c.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	return r
}

func benchBacklog(b *testing.B, pool *pgxpool.Pool, mode ClaimMode) benchResult {
	n := benchEnv("PGJOBS_BENCH_BACKLOG", 200000)
	ctx := context.Background()
	// Half the backlog is one noisy tenant's; the rest is spread over 99.
	// Inserted with the backend's batched enqueue statement, in one call.
	_, err := pool.Exec(ctx, `
SELECT count(*) FROM cellgate_jobs_insert_many(
    array_fill('bench_noop'::text, ARRAY[$1::int]), array_fill('default'::text, ARRAY[$1::int]),
    ARRAY(SELECT CASE WHEN g % 2 = 0 THEN 'noisy' ELSE 'tenant-' || lpad((g % 99)::text, 3, '0') END
          FROM generate_series(1, $1::int) AS g ORDER BY g),
    ARRAY(SELECT jsonb_build_object('n', g)::text FROM generate_series(1, $1::int) AS g ORDER BY g),
    array_fill(5, ARRAY[$1::int]), array_fill(now() - interval '1 minute', ARRAY[$1::int]),
    now(), array_fill(1::smallint, ARRAY[$1::int]))`, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE cellgate_jobs"); err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	c, be := benchClient(b, pool, mode, &done, nil, nil)
	cpu := startCPU(pool)
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for done.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("backlog not drained: %d of %d", done.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	r := benchResult{rate: float64(n) / time.Since(start).Seconds(), jobs: int64(n)}
	cpu.stop(&r)
	r.roundTrips(be)
	if _, err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return r
}
