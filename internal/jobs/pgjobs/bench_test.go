package pgjobs

import (
	"context"
	"fmt"
	"os"
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

// BenchmarkPostgresJobs measures end-to-end throughput (enqueue, claim, run a
// no-op handler, complete) in both claim orders in the same run:
//
//   - continuous: 64 producers enqueue (round-robin over 100 tenants)
//     while 32 workers work, for PGJOBS_BENCH_SECONDS (default 3) per
//     iteration; producers pause while 2,000 jobs wait, so jobs/s is the
//     rate the system sustains;
//   - backlog: workers drain PGJOBS_BENCH_BACKLOG (default 200000)
//     pre-inserted jobs, half of them from one noisy tenant.
//
// Run with -benchtime=1x; each iteration reports jobs/s.
func BenchmarkPostgresJobs(b *testing.B) {
	dsn := newMigratedDB(b)
	for _, scenario := range []string{"continuous", "backlog"} {
		b.Run(scenario, func(b *testing.B) {
			for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
				b.Run(string(mode), func(b *testing.B) {
					b.ReportAllocs()
					pool := newPool(b, dsn, "", 8)
					var total, jobsDone float64
					var pgCPU, goCPU time.Duration
					for range b.N {
						if _, err := pool.Exec(context.Background(), "TRUNCATE cellgate_jobs"); err != nil {
							b.Fatal(err)
						}
						var r benchResult
						if scenario == "continuous" {
							r = benchContinuous(b, pool, mode)
						} else {
							r = benchBacklog(b, pool, mode)
						}
						total += r.rate
						jobsDone += float64(r.jobs)
						pgCPU += r.pgCPU
						goCPU += r.goCPU
					}
					b.ReportMetric(total/float64(b.N), "jobs/s")
					// CPU per job is steadier than jobs/s on a shared machine:
					// PostgreSQL's (this database's backends, from /proc) and
					// this process's.
					if pgCPU > 0 {
						b.ReportMetric(float64(pgCPU.Microseconds())/jobsDone, "pg-cpu-µs/job")
					}
					b.ReportMetric(float64(goCPU.Microseconds())/jobsDone, "go-cpu-µs/job")
				})
			}
		})
	}
}

func benchClient(b *testing.B, pool *pgxpool.Pool, mode ClaimMode, done *atomic.Int64) (*jobs.Client, *Backend) {
	b.Helper()
	be, err := New(pool, Config{Claim: mode}, Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(context.Context, *jobs.Job[benchArgs]) error {
		done.Add(1)
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: benchWorkers}, be, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return c, be
}

// benchResult is one measured run.
type benchResult struct {
	rate         float64 // jobs/s
	jobs         int64
	pgCPU, goCPU time.Duration
}

// cpuMeter measures the CPU time of this process and of the PostgreSQL
// backends serving the benchmark's database (read from /proc, so only when
// the server runs on this machine; otherwise pg stays 0).
type cpuMeter struct {
	pool    *pgxpool.Pool
	goStart time.Duration
	pgStart map[int]time.Duration
}

func startCPU(pool *pgxpool.Pool) *cpuMeter {
	m := &cpuMeter{pool: pool, goStart: processCPU()}
	m.pgStart = m.backends()
	return m
}

func (m *cpuMeter) stop() (pg, goCPU time.Duration) {
	goCPU = processCPU() - m.goStart
	for pid, t := range m.backends() {
		pg += t - m.pgStart[pid]
	}
	return pg, goCPU
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

func benchContinuous(b *testing.B, pool *pgxpool.Pool, mode ClaimMode) benchResult {
	window := time.Duration(benchEnv("PGJOBS_BENCH_SECONDS", 3)) * time.Second
	var done atomic.Int64
	c, _ := benchClient(b, pool, mode, &done)
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	ctxs := make([]context.Context, benchTenants)
	for i := range ctxs {
		ctxs[i] = tenant.With(context.Background(), fmt.Sprintf("tenant-%03d", i))
	}
	var stop atomic.Bool
	var enqueued atomic.Int64
	var wg sync.WaitGroup
	var enqErr atomic.Value
	b.ResetTimer()
	cpu := startCPU(pool)
	start := time.Now()
	for p := range benchProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				// Steady state, not a growing backlog: producers hold back
				// while benchOutstanding jobs wait, so the rate measured is
				// the one the system sustains, enqueue and work together.
				for enqueued.Load()-done.Load() >= benchOutstanding && !stop.Load() {
					time.Sleep(100 * time.Microsecond)
				}
				if _, err := c.Enqueue(ctxs[(p*7+i)%benchTenants], benchArgs{N: i}); err != nil {
					enqErr.Store(err)
					return
				}
				enqueued.Add(1)
			}
		}()
	}
	time.Sleep(window)
	n := done.Load()
	elapsed := time.Since(start)
	pgCPU, goCPU := cpu.stop()
	stop.Store(true)
	wg.Wait()
	b.StopTimer()
	if err, _ := enqErr.Load().(error); err != nil {
		b.Fatalf("Enqueue: %v", err)
	}
	if _, err := c.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	return benchResult{rate: float64(n) / elapsed.Seconds(), jobs: n, pgCPU: pgCPU, goCPU: goCPU}
}

func benchBacklog(b *testing.B, pool *pgxpool.Pool, mode ClaimMode) benchResult {
	n := benchEnv("PGJOBS_BENCH_BACKLOG", 200000)
	ctx := context.Background()
	// Half the backlog is one noisy tenant's; the rest is spread over 99.
	_, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at)
SELECT 'bench_noop', 'default',
       CASE WHEN g % 2 = 0 THEN 'noisy' ELSE 'tenant-' || lpad((g % 99)::text, 3, '0') END,
       jsonb_build_object('n', g), 5, now() - interval '1 minute', now()
FROM generate_series(1, $1::int) AS g`, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE cellgate_jobs"); err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	c, _ := benchClient(b, pool, mode, &done)
	b.ResetTimer()
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
	elapsed := time.Since(start)
	pgCPU, goCPU := cpu.stop()
	b.StopTimer()
	if _, err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return benchResult{rate: float64(n) / elapsed.Seconds(), jobs: int64(n), pgCPU: pgCPU, goCPU: goCPU}
}
