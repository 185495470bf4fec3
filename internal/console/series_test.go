package console_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// clock is a test clock the console reads through Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func series(t *testing.T, env *consoletest.Env) console.SeriesReport {
	t.Helper()
	var rep console.SeriesReport
	if st, body := call(t, "GET", env.URL+"/admin/api/series", consoletest.AdminToken, &rep); st != http.StatusOK {
		t.Fatalf("series = %d %s", st, body)
	}
	return rep
}

// last is a series' newest value; gap reports a null one.
func last(t *testing.T, name string, ps []console.SeriesPoint) (v float64, gap bool) {
	t.Helper()
	if len(ps) == 0 {
		t.Fatalf("%s: no samples", name)
	}
	p := ps[len(ps)-1]
	if p.V == nil {
		return 0, true
	}
	return *p.V, false
}

func wantRate(t *testing.T, name string, ps []console.SeriesPoint, want float64) {
	t.Helper()
	if v, gap := last(t, name, ps); gap || v != want {
		t.Errorf("%s = %v (gap %v), want %v", name, v, gap, want)
	}
}

func wantGap(t *testing.T, name string, ps []console.SeriesPoint) {
	t.Helper()
	if v, gap := last(t, name, ps); !gap {
		t.Errorf("%s = %v, want a gap", name, v)
	}
}

func completed(tenant string) consoletest.Job {
	return consoletest.Job{Kind: "k", Tenant: tenant, State: pgjobs.StateCompleted, Attempt: 1}
}

// TestSeriesSampler: with an injected clock, a sample's rates are the
// change since the previous sample over the time between them; the first
// sample is a gap; the cell's waiting jobs and a tenant's ready jobs are
// levels; the series API and both pages show them.
func TestSeriesSampler(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)}
	var done atomic.Uint64
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) {
		c.Now = clk.Now
		c.Completed = done.Load
	}})
	env.Seed("shard-0", completed("acme"), consoletest.Job{Kind: "k", Tenant: "acme", Age: time.Minute})
	env.Seed("shard-1", consoletest.Job{Kind: "k", Tenant: "globex", Age: time.Minute})
	for range 3 {
		env.Rejections.Add("acme")
	}
	ctx := context.Background()
	env.Console.Sample(ctx)
	first := series(t, env)
	wantGap(t, "cell completed, first sample", first.Cell.CompletedPerSecond)
	wantGap(t, "cell refusals, first sample", first.Cell.RefusalsPerSecond)
	wantRate(t, "cell waiting", first.Cell.Backlog, 2)
	if len(first.Tenants) != 1 || first.Tenants[0].Tenant != "acme" {
		t.Fatalf("tenants = %+v, want acme", first.Tenants)
	}
	wantGap(t, "acme completed, first sample", first.Tenants[0].CompletedPerSecond)
	wantRate(t, "acme ready", first.Tenants[0].Backlog, 1)

	env.Seed("shard-0", completed("acme"), completed("acme"))
	env.Seed("shard-1", completed("acme"), completed("globex"))
	for range 5 {
		env.Rejections.Add("acme")
	}
	env.Rejections.Add("globex")
	done.Add(20)
	clk.Add(10 * time.Second)
	env.Console.Sample(ctx)
	rep := series(t, env)
	wantRate(t, "cell completed", rep.Cell.CompletedPerSecond, 2)
	wantRate(t, "cell refusals", rep.Cell.RefusalsPerSecond, 0.6)
	if len(rep.Tenants) != 2 || rep.Tenants[0].Tenant != "acme" || rep.Tenants[1].Tenant != "globex" {
		t.Fatalf("tenants = %+v, want acme then globex", rep.Tenants)
	}
	wantRate(t, "acme completed", rep.Tenants[0].CompletedPerSecond, 0.3)
	wantRate(t, "acme refusals", rep.Tenants[0].RefusalsPerSecond, 0.5)
	wantGap(t, "globex completed, its first sample", rep.Tenants[1].CompletedPerSecond)
	wantGap(t, "globex refusals, its first sample", rep.Tenants[1].RefusalsPerSecond)
	if rep.Every != console.DefaultSampleEvery || rep.Points != console.SeriesPoints || len(rep.Cell.Backlog) != 2 {
		t.Errorf("series = every %v, %d points, %d samples", rep.Every, rep.Points, len(rep.Cell.Backlog))
	}

	b := newBrowser(t)
	b.post(env.URL+"/admin/login", map[string][]string{"token": {consoletest.AdminToken}})
	if st, body := b.get(env.URL + "/admin/"); st != http.StatusOK || !strings.Contains(body, `id="chart-throughput"`) || !strings.Contains(body, `<polyline`) {
		t.Errorf("overview = %d, want the throughput chart with a line:\n%s", st, body)
	}
	st, body := b.get(env.URL + "/admin/tenants")
	if st != http.StatusOK || !strings.Contains(body, `id="chart-tenant-completed"`) || !strings.Contains(body, "<title>globex</title>") {
		t.Errorf("tenants page = %d, want the tenant charts:\n%s", st, body)
	}
}

// TestSeriesPartialFirstSample: a tenant first sampled while a database
// is down gets that database's baseline when it is back, so its completed
// jobs there do not show as one interval's burst.
func TestSeriesPartialFirstSample(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)}
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) { c.Now = clk.Now }})
	env.Seed("shard-1", completed("acme"), completed("acme"), completed("acme"), completed("acme"), completed("acme"))
	env.Seed("shard-0", completed("acme"))
	env.Rejections.Add("acme")
	env.MakeUnavailable("shard-1")
	ctx := context.Background()
	env.Console.Sample(ctx)
	rep := series(t, env)
	wantGap(t, "cell waiting with shard-1 down", rep.Cell.Backlog)
	wantGap(t, "acme ready with shard-1 down", rep.Tenants[0].Backlog)

	env.MakeAvailable("shard-1")
	env.Seed("shard-0", completed("acme"))
	clk.Add(10 * time.Second)
	env.Console.Sample(ctx)
	rep = series(t, env)
	// Only shard-0's one new job counts: shard-1's five are its baseline.
	wantRate(t, "acme completed after shard-1 is back", rep.Tenants[0].CompletedPerSecond, 0.1)
	wantRate(t, "acme ready", rep.Tenants[0].Backlog, 0)

	env.Seed("shard-1", completed("acme"), completed("acme"))
	clk.Add(10 * time.Second)
	env.Console.Sample(ctx)
	wantRate(t, "acme completed", series(t, env).Tenants[0].CompletedPerSecond, 0.2)
}

// TestSeriesBounded: however many tenants are refused, the sampler keeps
// SeriesTenants, the most refused, and each series at most SeriesPoints.
func TestSeriesBounded(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)}
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) { c.Now = clk.Now }})
	for i := range 12 {
		for range 12 - i {
			env.Rejections.Add("t" + itoa(int64(i)))
		}
	}
	ctx := context.Background()
	for range console.SeriesPoints + 5 {
		env.Console.Sample(ctx)
		clk.Add(10 * time.Second)
	}
	rep := series(t, env)
	if len(rep.Tenants) != console.SeriesTenants || rep.Tenants[0].Tenant != "t0" || rep.Tenants[7].Tenant != "t7" {
		t.Fatalf("%d tenants, want the %d most refused in order", len(rep.Tenants), console.SeriesTenants)
	}
	if n := len(rep.Tenants[0].RefusalsPerSecond); n != console.SeriesPoints || len(rep.Cell.CompletedPerSecond) != console.SeriesPoints {
		t.Errorf("%d samples kept, want %d", n, console.SeriesPoints)
	}
}

// TestRunSamplerStops: RunSampler samples on its period and returns when
// its owner cancels it.
func TestRunSamplerStops(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) { c.SampleEvery = 20 * time.Millisecond }})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		env.Console.RunSampler(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(series(t, env).Cell.Backlog) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("RunSampler took fewer than 3 samples in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("RunSampler did not return after its context ended")
	}
}

// TestLanesAndInFlight: the lanes view counts busy workers per lane and per
// database from the workers' state; the tenants view shows in flight
// against the cap and the tenant's lanes.
func TestLanesAndInFlight(t *testing.T) {
	t.Parallel()
	// The PostgreSQL backend: no lanes, workers per database.
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) {
		c.Workers = func(dst []jobs.JobID) []jobs.JobID {
			return append(dst, 7, 0, 0, 0, 0, 8, 9, 0, 0, 0, 0, 0)
		}
		c.InFlight = func(tenant string) (int64, int64) {
			if tenant == "acme" {
				return 3, 10
			}
			return 0, 10
		}
	}})
	env.Rejections.Add("acme")
	var lr console.LanesReport
	if st, body := call(t, "GET", env.URL+"/admin/api/lanes", consoletest.AdminToken, &lr); st != http.StatusOK {
		t.Fatalf("lanes = %d %s", st, body)
	}
	if !lr.Observed || lr.LanesApply || lr.Busy != 3 || lr.Workers != 12 || len(lr.PerLane) != 1 || lr.PerLane[0].Busy != 3 || lr.PerLane[0].Workers != 12 {
		t.Errorf("lanes = %+v, want one lane, 3 of 12 busy", lr)
	}
	if len(lr.PerDatabase) != 3 || lr.PerDatabase[0].Busy != 1 || lr.PerDatabase[1].Busy != 2 || lr.PerDatabase[2].Busy != 0 || lr.PerDatabase[1].Database != "shard-0" {
		t.Errorf("per database = %+v, want control 1, shard-0 2, shard-1 0", lr.PerDatabase)
	}
	var tr console.TenantsReport
	call(t, "GET", env.URL+"/admin/api/tenants", consoletest.AdminToken, &tr)
	if !tr.InFlightKnown || len(tr.Tenants) != 1 || tr.Tenants[0].InFlight != 3 || tr.Tenants[0].Cap != 10 || len(tr.Tenants[0].Lanes) != 0 {
		t.Errorf("tenants = %+v, want acme 3 in flight of 10, no lanes", tr)
	}
	b := newBrowser(t)
	b.post(env.URL+"/admin/login", map[string][]string{"token": {consoletest.AdminToken}})
	if _, body := b.get(env.URL + "/admin/tenants"); !strings.Contains(body, "3 / 10") {
		t.Errorf("tenants page lacks acme's 3 / 10 in flight:\n%s", body)
	}
	if _, body := b.get(env.URL + "/admin/cells"); !strings.Contains(body, "3 of 12 workers run a job now") || !strings.Contains(body, `id="lanes"`) {
		t.Errorf("cells page lacks the busy workers:\n%s", body)
	}

	// The local backend: lanes, each tenant on its shuffle-sharded pair.
	local := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) {
		c.Databases = nil
		c.Spec.Jobs.Backend, c.Spec.Jobs.Workers = "local", 4
		c.Spec.Jobs.Tenants.Lanes, c.Spec.Jobs.Tenants.LanesPerTenant = 4, 2
		c.Workers = func(dst []jobs.JobID) []jobs.JobID { return append(dst, 5, 0, 6, 0) }
	}})
	local.Rejections.Add("acme")
	lr = console.LanesReport{}
	call(t, "GET", local.URL+"/admin/api/lanes", consoletest.AdminToken, &lr)
	if !lr.LanesApply || len(lr.PerLane) != 4 || lr.Busy != 2 || lr.PerLane[0].Busy != 1 || lr.PerLane[2].Busy != 1 || lr.PerLane[1].Busy != 0 ||
		lr.PerLane[0].Workers != 1 || lr.PerLane[0].TenantShare != 0.5 || len(lr.PerDatabase) != 1 || lr.PerDatabase[0].Database != "local" {
		t.Errorf("local lanes = %+v", lr)
	}
	want := jobs.ShuffleShard("acme", 4, 2)
	for l, row := range lr.PerLane {
		serves := l == want[0] || l == want[1]
		if got := len(row.Tenants) == 1 && row.Tenants[0] == "acme"; got != serves {
			t.Errorf("lane %d tenants = %v; acme's lanes are %v", l, row.Tenants, want)
		}
	}
	tr = console.TenantsReport{}
	call(t, "GET", local.URL+"/admin/api/tenants", consoletest.AdminToken, &tr)
	if len(tr.Tenants) != 1 || len(tr.Tenants[0].Lanes) != 2 || tr.Tenants[0].Lanes[0] != want[0] || tr.Tenants[0].Lanes[1] != want[1] || tr.InFlightKnown {
		t.Errorf("local tenants = %+v, want acme on lanes %v, in flight unknown", tr, want)
	}
}
