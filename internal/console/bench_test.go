package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// benchInt reads a size from the environment, for quick runs.
func benchInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// The million jobs' make-up (per shard, by a hash of the row number, so
// every tenant has jobs in every state): 90 % completed, 5 % failed, 4 %
// waiting and placed in the fair order, 1 % scheduled an hour ahead
// (waiting, not placed), and 1 in 5,000 running. Tenants t0000…t0999
// round-robin; four kinds; queues default and billing, and "rare" (1 job
// in 997) for the slow shape.
const sqlLoadMillion = `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, state, attempt, max_attempts, run_at, created_at,
                           attempted_at, finished_at, errors, vtime)
SELECT (ARRAY['send_email', 'bill_order', 'resize_image', 'sync_crm'])[g % 4 + 1],
       CASE WHEN g % 997 = 7 THEN 'rare' WHEN g % 3 = 0 THEN 'billing' ELSE 'default' END,
       't' || lpad((g % 1000)::text, 4, '0'),
       jsonb_build_object('n', g),
       s.state,
       CASE s.state WHEN 'available' THEN 0 WHEN 'failed' THEN 5 ELSE 1 END,
       5,
       CASE WHEN s.state = 'available' AND s.r = 99 THEN now() + interval '1 hour' ELSE c.at END,
       c.at,
       CASE WHEN s.state <> 'available' THEN c.at END,
       CASE WHEN s.state IN ('completed', 'failed') THEN c.at + interval '1 second' END,
       CASE WHEN s.state = 'failed'
            THEN jsonb_build_array(jsonb_build_object('attempt', 5, 'at', c.at, 'error', 'card declined'))
            ELSE '[]' END,
       CASE WHEN NOT (s.state = 'available' AND s.r = 99) THEN g END
FROM generate_series(1, $1::int) g
CROSS JOIN LATERAL (SELECT now() - ($1::int - g) * interval '1 second' + $2::int * interval '1 millisecond' AS at) c
CROSS JOIN LATERAL (SELECT r, CASE WHEN g % 5000 = 1 THEN 'running'
                                   WHEN r < 90 THEN 'completed'
                                   WHEN r < 95 THEN 'failed'
                                   ELSE 'available' END AS state
                    FROM (SELECT ((hashint4(g)::bigint % 100) + 100) % 100 AS r) h) s`

// BenchmarkConsoleMillion measures the console over 1,000,000 jobs, 500,000
// in each of two shards (CONSOLE_BENCH_JOBS_PER_SHARD), loaded with one
// INSERT … generate_series per shard into its own databases (dropped
// after). Each shape is requested CONSOLE_BENCH_SAMPLES times (200), one
// at a time, through the HTTP API or page as an operator's browser or
// script would, and every answer is checked (sizes, filters, order), so no
// shape can be measured on an empty or wrong answer. It reports each
// shape's p50 and p95 in ms:
//
//   - first-page (api/jobs), first-page-html (the /admin/jobs page),
//     tenant, failed, tenant-failed, second-page (keyset cursor);
//   - rare-queue: a queue filter matching 1 job in 997, the slow shape
//     (the list walks the primary key past the jobs it skips), a tenth of
//     the samples;
//   - overview (the /admin/ page) and api-queues, from the count cache,
//     after one read that fills it; overview-every-12s-max-ms: the slowest
//     of three overview reads 12 s apart (the cache kept warm between them,
//     none waits for a count);
//   - count: an uncached count of both shards at once (what a reader waits
//     for when the cache is 10 s old), CONSOLE_BENCH_COUNTS times (10);
//
// and enqueue-with-over-without: the time to enqueue
// CONSOLE_BENCH_ENQUEUE (40,000) ready jobs through cellgate_jobs_insert_many
// with migration 000003's indexes over the time without them (dropped and
// rebuilt, alternating, four rounds each, each round logged), with the
// indexes' build time (both, the mean of their rebuilds).
// load1 is the machine's load average when it ends.
//
// Run it with `make bench-console`; it is not part of `make bench` (the
// load alone takes tens of seconds).
func BenchmarkConsoleMillion(b *testing.B) {
	perShard := benchInt("CONSOLE_BENCH_JOBS_PER_SHARD", 500_000)
	samples := benchInt("CONSOLE_BENCH_SAMPLES", 200)
	counts := benchInt("CONSOLE_BENCH_COUNTS", 10)
	enqueue := benchInt("CONSOLE_BENCH_ENQUEUE", 40_000)
	b.ReportAllocs()
	for b.Loop() {
		runConsoleMillion(b, perShard, samples, counts, enqueue)
	}
}

func runConsoleMillion(b *testing.B, perShard, samples, counts, enqueue int) {
	env := consoletest.New(b, consoletest.Options{DatabaseTimeout: 10 * time.Second})
	ctx := context.Background()
	shards := []string{"shard-0", "shard-1"}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	for i, name := range shards {
		wg.Go(func() {
			pool := env.Pool(name)
			if _, err := pool.Exec(ctx, sqlLoadMillion, perShard, 500*i); err != nil {
				errs[i] = fmt.Errorf("load %s: %w", name, err)
				return
			}
			if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) cellgate_jobs`); err != nil {
				errs[i] = fmt.Errorf("vacuum %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(time.Since(start).Seconds(), "load-s")

	// What the answers must hold, counted once from the tables. The tenant
	// measured is the one with the most failed jobs that still fit on one
	// page (about 50 of its 1,000 jobs at full size).
	failedBy := map[string]int{}
	var rare int
	for _, name := range shards {
		var total, r int
		if err := env.Pool(name).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE queue = 'rare') FROM cellgate_jobs`).Scan(&total, &r); err != nil {
			b.Fatal(err)
		}
		if total != perShard {
			b.Fatalf("%s holds %d jobs, want %d", name, total, perShard)
		}
		rare += r
		rows, err := env.Pool(name).Query(ctx, `SELECT tenant, count(*) FROM cellgate_jobs WHERE state = 'failed' GROUP BY tenant`)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var t string
			var n int
			if err := rows.Scan(&t, &n); err != nil {
				b.Fatal(err)
			}
			failedBy[t] += n
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
	}
	var tenant string
	var failedOfTenant int
	for t, n := range failedBy {
		if n < pgjobs.DefaultListLimit && (n > failedOfTenant || n == failedOfTenant && t < tenant) {
			tenant, failedOfTenant = t, n
		}
	}
	if failedOfTenant == 0 {
		b.Fatalf("no tenant has 1..%d failed jobs: %v", pgjobs.DefaultListLimit-1, failedBy)
	}

	get := func(path string) (int, []byte) {
		req, err := http.NewRequest(http.MethodGet, env.URL+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+consoletest.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return resp.StatusCode, body
	}
	jobPage := func(body []byte) (console.JobPage, error) {
		var p console.JobPage
		if err := json.Unmarshal(body, &p); err != nil {
			return p, err
		}
		if p.Partial {
			return p, fmt.Errorf("partial answer: %+v", p.Databases)
		}
		return p, checkOrder(p.Jobs)
	}
	full := func(want func(pgjobs.JobInfo) error) func([]byte) error {
		return func(body []byte) error {
			p, err := jobPage(body)
			if err != nil {
				return err
			}
			if len(p.Jobs) != pgjobs.DefaultListLimit || p.NextCursor == "" {
				return fmt.Errorf("%d jobs, cursor %q; want a full page and a next one", len(p.Jobs), p.NextCursor)
			}
			dbs := map[string]bool{}
			for _, j := range p.Jobs {
				dbs[j.Database] = true
				if err := want(j); err != nil {
					return fmt.Errorf("job %s/%d: %w", j.Database, j.ID, err)
				}
			}
			if !dbs["shard-0"] || !dbs["shard-1"] {
				return fmt.Errorf("page holds jobs of %v, want both shards", dbs)
			}
			return nil
		}
	}
	anyJob := func(pgjobs.JobInfo) error { return nil }

	// The second page's cursor, and the first page it follows.
	_, body := get("/admin/api/jobs")
	first, err := jobPage(body)
	if err != nil || first.NextCursor == "" || len(first.Jobs) == 0 {
		b.Fatalf("first page: %v %s", err, body)
	}
	shown := map[string]bool{}
	for _, j := range first.Jobs {
		shown[fmt.Sprintf("%s/%d", j.Database, j.ID)] = true
	}
	oldest := first.Jobs[len(first.Jobs)-1].CreatedAt

	overview := func(body []byte) error {
		// The chart ends each database's bar with its total.
		if n := strings.Count(string(body), fmt.Sprintf(">%d</text>", perShard)); n != 2 || !strings.Contains(string(body), `id="count-age"`) {
			return fmt.Errorf("overview shows the total of %d shards, want 2, and the counts' age", n)
		}
		return nil
	}
	shapes := []struct {
		name, path string
		check      func([]byte) error
	}{
		{"first-page", "/admin/api/jobs", full(anyJob)},
		{"first-page-html", "/admin/jobs", func(body []byte) error {
			if n := strings.Count(string(body), `<tr class="state-`); n != pgjobs.DefaultListLimit || !strings.Contains(string(body), `id="next"`) {
				return fmt.Errorf("page shows %d jobs, want %d and a next page", n, pgjobs.DefaultListLimit)
			}
			return nil
		}},
		{"tenant", "/admin/api/jobs?tenant=" + tenant, full(func(j pgjobs.JobInfo) error {
			if j.Tenant != tenant {
				return fmt.Errorf("tenant %q", j.Tenant)
			}
			return nil
		})},
		{"failed", "/admin/api/jobs?state=failed", full(func(j pgjobs.JobInfo) error {
			if j.State != pgjobs.StateFailed || len(j.Errors) != 1 {
				return fmt.Errorf("state %s, %d errors", j.State, len(j.Errors))
			}
			return nil
		})},
		{"tenant-failed", "/admin/api/jobs?state=failed&tenant=" + tenant, func(body []byte) error {
			p, err := jobPage(body)
			if err != nil {
				return err
			}
			if len(p.Jobs) != failedOfTenant || p.NextCursor != "" {
				return fmt.Errorf("%d jobs, cursor %q; want all %d failed jobs of %s on one page", len(p.Jobs), p.NextCursor, failedOfTenant, tenant)
			}
			for _, j := range p.Jobs {
				if j.Tenant != tenant || j.State != pgjobs.StateFailed {
					return fmt.Errorf("job %s/%d: %s %s", j.Database, j.ID, j.Tenant, j.State)
				}
			}
			return nil
		}},
		{"second-page", "/admin/api/jobs?cursor=" + url.QueryEscape(first.NextCursor), full(func(j pgjobs.JobInfo) error {
			if shown[fmt.Sprintf("%s/%d", j.Database, j.ID)] || j.CreatedAt.After(oldest) {
				return fmt.Errorf("on the first page already, or newer than its last job")
			}
			return nil
		})},
		{"rare-queue", "/admin/api/jobs?queue=rare", func(body []byte) error {
			p, err := jobPage(body)
			if err != nil {
				return err
			}
			if want := min(rare, pgjobs.DefaultListLimit); len(p.Jobs) != want {
				return fmt.Errorf("%d jobs, want %d", len(p.Jobs), want)
			}
			for _, j := range p.Jobs {
				if j.Queue != "rare" {
					return fmt.Errorf("job %s/%d in queue %s", j.Database, j.ID, j.Queue)
				}
			}
			return nil
		}},
		{"overview", "/admin/", overview},
		{"api-queues", "/admin/api/queues", func(body []byte) error {
			var q console.QueuesReport
			if err := json.Unmarshal(body, &q); err != nil {
				return err
			}
			if q.Partial || q.CountAge >= console.CountsMaxAge {
				return fmt.Errorf("partial %v, counts %v old", q.Partial, q.CountAge)
			}
			for _, db := range q.Databases[1:] {
				var n int64
				for _, d := range db.Queues {
					n += d.Available + d.Running + d.Completed + d.Failed
				}
				if n != int64(perShard) {
					return fmt.Errorf("%s counts %d jobs, want %d", db.Database, n, perShard)
				}
			}
			return nil
		}},
	}
	for _, s := range shapes {
		n := samples
		if s.name == "rare-queue" { // the slow shape: a tenth of the samples
			n = max(samples/10, 10)
		}
		lat := make([]time.Duration, 0, n)
		for i := 0; i <= n; i++ {
			t0 := time.Now()
			st, body := get(s.path)
			d := time.Since(t0)
			if st != http.StatusOK {
				b.Fatalf("%s: %d %s", s.name, st, body)
			}
			if err := s.check(body); err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			if i > 0 { // the first fills the count cache and warms the pools
				lat = append(lat, d)
			}
		}
		report(b, s.name, lat)
	}

	// The overview as a person reads it: every 12 s (past CountsMaxAge),
	// so each read finds counts the cache kept warm, not ones it must wait
	// for.
	var slowest time.Duration
	for range 3 {
		time.Sleep(12 * time.Second)
		t0 := time.Now()
		st, body := get("/admin/")
		slowest = max(slowest, time.Since(t0))
		if st != http.StatusOK {
			b.Fatalf("overview every 12 s: %d %s", st, body)
		}
		if err := overview(body); err != nil {
			b.Fatalf("overview every 12 s: %v", err)
		}
	}
	b.ReportMetric(float64(slowest.Microseconds())/1000, "overview-every-12s-max-ms")

	// An uncached count of both shards, as the cache runs it.
	lat := make([]time.Duration, 0, counts)
	for range counts {
		t0 := time.Now()
		var wg sync.WaitGroup
		totals := make([]int64, len(shards))
		for i, db := range env.Databases[1:] {
			wg.Go(func() {
				ds, err := db.Depths(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				for _, d := range ds {
					totals[i] += d.Available + d.Running + d.Completed + d.Failed
				}
			})
		}
		wg.Wait()
		lat = append(lat, time.Since(t0))
		for i := range shards {
			if errs[i] != nil || totals[i] != int64(perShard) {
				b.Fatalf("count of %s: %d, %v", shards[i], totals[i], errs[i])
			}
		}
	}
	report(b, "count", lat)

	enqueueCost(b, env.Pool("shard-1"), enqueue)
	b.ReportMetric(loadAverage(b), "load1")
}

// checkOrder: jobs newest first (by creation time), ids falling within a
// database.
func checkOrder(jj []pgjobs.JobInfo) error {
	last := map[string]int64{}
	for i, j := range jj {
		if i > 0 && j.CreatedAt.After(jj[i-1].CreatedAt) {
			return fmt.Errorf("job %s/%d is newer than the one before it", j.Database, j.ID)
		}
		if l, ok := last[j.Database]; ok && int64(j.ID) >= l {
			return fmt.Errorf("job %s/%d after %d", j.Database, j.ID, l)
		}
		last[j.Database] = int64(j.ID)
	}
	return nil
}

// report adds a shape's p50 and p95 in milliseconds.
func report(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(lat[max(i, 0)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), name+"-p50-ms")
	b.ReportMetric(pct(0.95), name+"-p95-ms")
}

// enqueueCost enqueues n ready jobs (batches of 500, through the
// enqueue function) with and without migration 000003's indexes, four
// rounds each in alternating order, and reports the ratio of the summed
// times and the indexes' build time. The table grows by 8n jobs.
func enqueueCost(b *testing.B, pool *pgxpool.Pool, n int) {
	ctx := context.Background()
	names := []string{"cellgate_jobs_tenant_list_idx", "cellgate_jobs_failed_idx"}
	defs := make([]string, len(names))
	for i, ix := range names {
		if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef(to_regclass($1))`, ix).Scan(&defs[i]); err != nil {
			b.Fatal(err)
		}
	}
	insert := func() time.Duration {
		const batch = 500
		kinds, queues, tenants, args := make([]string, batch), make([]string, batch), make([]string, batch), make([]string, batch)
		maxAttempts, runAts, prios := make([]int32, batch), make([]time.Time, batch), make([]int16, batch)
		t0 := time.Now()
		for done := 0; done < n; done += batch {
			now := time.Now()
			for i := range batch {
				kinds[i], queues[i], tenants[i] = "send_email", "default", fmt.Sprintf("t%04d", (done+i)%1000)
				args[i], maxAttempts[i], runAts[i], prios[i] = `{"n":0}`, 5, now, 1
			}
			if _, err := pool.Exec(ctx, `SELECT count(*) FROM cellgate_jobs_insert_many($1, $2, $3, $4, $5, $6, $7, $8)`,
				kinds, queues, tenants, args, maxAttempts, runAts, now, prios); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	drop := func() {
		if _, err := pool.Exec(ctx, `DROP INDEX `+strings.Join(names, ", ")); err != nil {
			b.Fatal(err)
		}
	}
	const rounds = 4
	var with, without, build time.Duration
	for round := range rounds {
		var w, wo time.Duration
		if round%2 == 0 {
			w = insert()
			drop()
			wo = insert()
		} else {
			wo = insert()
			t0 := time.Now()
			for _, def := range defs {
				if _, err := pool.Exec(ctx, def); err != nil {
					b.Fatal(err)
				}
			}
			build += time.Since(t0)
			w = insert()
		}
		b.Logf("enqueue round %d: %d ready jobs in %v with the indexes, %v without", round, n, w, wo)
		with, without = with+w, without+wo
	}
	b.ReportMetric(with.Seconds()/without.Seconds(), "enqueue-with-over-without")
	b.ReportMetric(float64(n)/(with.Seconds()/rounds), "enqueue-with-jobs/s")
	b.ReportMetric(float64(build.Milliseconds())/(rounds/2), "index-build-ms")
}

// loadAverage is the machine's 1-minute load average (0 where
// /proc/loadavg does not exist).
func loadAverage(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		b.Fatalf("/proc/loadavg: %q", raw)
	}
	return f
}
