package browser

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
)

// shots is where the screenshots go: a temporary directory unless
// -shots names one (make screenshots passes ../../docs/console, the ones
// docs/console.md shows), so a test run leaves the tree clean.
var shots = flag.String("shots", "", "write the screenshots into this directory (default: a temporary one)")

// chromiumPath finds the browser: $CHROMIUM, else chromium or
// chromium-browser on PATH. A missing browser fails the test.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (install it: apt-get install -y chromium, or set $CHROMIUM); the browser tests never skip")
	return ""
}

// newBrowser starts a headless Chromium of its own (own profile, own
// cookies) for one user.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// follow clicks sel and waits for the page the click navigates to, then
// runs then on it. Waiting in the same Run as the click races the
// navigation: a query can land in the old page's context as the browser
// destroys it ("Cannot find context with specified id").
func follow(t *testing.T, ctx context.Context, what, sel string, then ...chromedp.Action) {
	t.Helper()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(sel, chromedp.ByQuery)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	run(t, ctx, what, then...)
}

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	var png []byte
	run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(&png, 100)) // quality 100: PNG, not JPEG
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	run(t, ctx, "log in",
		chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
	)
	follow(t, ctx, "log in", `#login`, chromedp.WaitVisible(`#chart`, chromedp.ByQuery))
}

// TestConsoleInBrowser walks the console as an operator and as a read-only
// user, in a real browser with JavaScript on (the pages need none).
func TestConsoleInBrowser(t *testing.T) {
	dir := *shots
	if dir == "" {
		dir = t.TempDir()
	}
	// The charts draw what the sampler took: a test clock and the counts
	// cmd/server would hand over, sampled below as every 10 s.
	var (
		mu        sync.Mutex
		now       = time.Now().Add(-6 * time.Minute)
		completed atomic.Uint64
	)
	// Two plans: the default's cap is the 8 the page shows; initech is on
	// pro in the tenant table.
	env := consoletest.New(t, consoletest.Options{Plans: []config.Plan{
		{Name: "standard", MaxConcurrentRequests: 8, MaxDBConnections: 2, RatePerSecond: 20, Burst: 40, Jobs: config.PlanJobs{MaxConcurrent: 2, Weight: 1}},
		{Name: "pro", MaxConcurrentRequests: 32, MaxDBConnections: 4, RatePerSecond: 50, Burst: 100, Jobs: config.PlanJobs{MaxConcurrent: 4, Weight: 4}},
	}, Configure: func(c *console.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		c.Completed = completed.Load
		c.InFlight = func(tenant string) (int64, int64) { return int64(len(tenant) % 4), 8 }
		c.Workers = func(dst []jobs.JobID) []jobs.JobID { return append(dst, 11, 0, 12, 0, 0, 13, 0, 0, 0, 0, 0, 14) }
	}})
	shard0 := []consoletest.Job{
		{Kind: "send_welcome", Tenant: "acme", Age: 9 * time.Minute},
		{Kind: "send_welcome", Tenant: "acme", State: pgjobs.StateCompleted, Attempt: 1, Age: 8 * time.Minute},
		{Kind: "send_welcome", Tenant: "globex", State: pgjobs.StateRunning, Attempt: 1, Age: 7 * time.Minute},
	}
	env.Seed("shard-0", shard0...)
	failed := env.Seed("shard-1",
		consoletest.Job{Kind: "bill_order", Queue: "billing", Tenant: "initech", State: pgjobs.StateFailed, Attempt: 5,
			Errors: []string{"card declined", "card declined", "gateway timeout", "card declined", "card declined"}, Age: 6 * time.Minute},
		consoletest.Job{Kind: "bill_order", Queue: "billing", Tenant: "initech", Age: 5 * time.Minute},
		consoletest.Job{Kind: "send_welcome", Tenant: "umbrella", State: pgjobs.StateCompleted, Attempt: 2, Errors: []string{"smtp 451"}, Age: 4 * time.Minute},
	)[0]
	env.Seed("control", consoletest.Job{Kind: "nightly_report", Queue: "maintenance", State: pgjobs.StateCompleted, Attempt: 1, Age: 10 * time.Minute})

	pro := "pro"
	if _, _, err := env.Plans.Apply(context.Background(), "initech", "test", plans.Change{Plan: &pro,
		Set: map[plans.Field]plans.Override{plans.RatePerSecond: {Value: 10, Enforce: false}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 36 {
		for k := range 1 + i%7 {
			tenant := []string{"initech", "initech", "acme", "umbrella", "initech"}[(i+k)%5]
			env.Rejections.Add(tenant)
			env.LimitCounts.Add(tenant, []string{console.ResourceRequest, console.ResourceRate}[k%2], false)
			if tenant == "initech" {
				env.LimitCounts.Add(tenant, console.ResourceRate, true)
			}
		}
		if i%4 == 0 {
			env.Seed("shard-1", consoletest.Job{Kind: "send_welcome", Tenant: "umbrella", State: pgjobs.StateCompleted, Attempt: 1})
		}
		if i%6 == 1 {
			env.Seed("shard-0", consoletest.Job{Kind: "send_welcome", Tenant: "acme", State: pgjobs.StateCompleted, Attempt: 1})
		}
		completed.Add(uint64(20 + (i*7)%30))
		env.Console.Sample(context.Background())
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}

	op := newBrowser(t)
	login(t, op, env.URL, consoletest.OperatorToken)
	var lines int
	run(t, op, "overview charts", chromedp.WaitVisible(`#chart-throughput`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#chart-throughput polyline').length`, &lines))
	if lines != 2 {
		t.Errorf("throughput chart has %d lines, want 2 (completed, refused)", lines)
	}
	shot(t, op, dir, "overview.png")

	var table string
	run(t, op, "list jobs",
		chromedp.Navigate(env.URL+"/admin/jobs"),
		chromedp.WaitVisible(`#jobs`, chromedp.ByQuery),
		chromedp.Text(`#jobs tbody`, &table, chromedp.ByQuery),
	)
	for _, want := range []string{"shard-0", "shard-1", "control", "initech", "globex"} {
		if !strings.Contains(table, want) {
			t.Errorf("jobs table lacks %q:\n%s", want, table)
		}
	}
	shot(t, op, dir, "jobs.png")

	run(t, op, "filter by tenant", chromedp.SetValue(`#tenant`, "initech", chromedp.ByQuery))
	follow(t, op, "filter by tenant", `#filter`,
		chromedp.WaitVisible(`#jobs`, chromedp.ByQuery),
		chromedp.Text(`#jobs tbody`, &table, chromedp.ByQuery),
	)
	if strings.Contains(table, "acme") || strings.Count(table, "initech") != 2 {
		t.Errorf("tenant filter shows:\n%s", table)
	}

	jobLink := `a[href="/admin/jobs/shard-1/` + strconv.FormatInt(failed, 10) + `"]`
	var state string
	follow(t, op, "open the failed job", jobLink,
		chromedp.WaitVisible(`#action-retry`, chromedp.ByQuery),
		chromedp.Text(`#state`, &state, chromedp.ByQuery),
	)
	if state != "failed" {
		t.Fatalf("job state = %q, want failed", state)
	}
	shot(t, op, dir, "job.png")
	follow(t, op, "retry it", `#action-retry`,
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`#state`, &state, chromedp.ByQuery),
	)
	if state != "available" {
		t.Errorf("after retry the job is %q, want available", state)
	}
	if j, err := env.Databases[2].Job(context.Background(), jobs.JobID(failed)); err != nil || j.State != pgjobs.StateAvailable {
		t.Errorf("in shard-1 the job is %+v, %v; want available", j, err)
	}

	// Pause the billing queue of shard-1 from the overview: the row shows
	// it paused and offers resume; shard-1's backend lists it paused.
	billing := `form.queue-act[data-database="shard-1"][data-queue="billing"] button`
	var label string
	run(t, op, "overview for the pause", chromedp.Navigate(env.URL+"/admin/"), chromedp.WaitVisible(billing, chromedp.ByQuery),
		chromedp.Text(billing, &label, chromedp.ByQuery))
	if label != "pause" {
		t.Fatalf("billing's button says %q, want pause", label)
	}
	follow(t, op, "pause billing on shard-1", billing,
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.WaitVisible(`[data-paused="billing"]`, chromedp.ByQuery),
		chromedp.Text(billing, &label, chromedp.ByQuery),
	)
	if label != "resume" {
		t.Errorf("after the pause billing's button says %q, want resume", label)
	}
	if q, err := env.Databases[2].PausedQueues(context.Background()); err != nil || len(q) != 1 || q[0] != "billing" {
		t.Errorf("shard-1's paused queues = %v, %v; want [billing]", q, err)
	}
	shot(t, op, dir, "queue-paused.png")

	ro := newBrowser(t)
	login(t, ro, env.URL, consoletest.AdminToken)
	// The read-only user sees the queue paused and no pause or resume
	// button.
	var queueButtons, pausedBadges int
	run(t, ro, "overview read-only",
		chromedp.Evaluate(`document.querySelectorAll('form.queue-act, button.pause, button.resume').length`, &queueButtons),
		chromedp.Evaluate(`document.querySelectorAll('[data-paused="billing"]').length`, &pausedBadges),
	)
	if queueButtons != 0 || pausedBadges != 1 {
		t.Errorf("read-only overview: %d pause/resume controls (want 0), %d paused badges for billing (want 1)", queueButtons, pausedBadges)
	}

	// Resume it.
	follow(t, op, "resume billing on shard-1", billing,
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('[data-paused]').length`, &pausedBadges),
		chromedp.Text(billing, &label, chromedp.ByQuery),
	)
	if pausedBadges != 0 || label != "pause" {
		t.Errorf("after the resume: %d paused badges, button %q; want none and pause", pausedBadges, label)
	}
	if q, err := env.Databases[2].PausedQueues(context.Background()); err != nil || len(q) != 0 {
		t.Errorf("shard-1's paused queues after the resume = %v, %v; want none", q, err)
	}

	var buttons int
	var role string
	run(t, ro, "open the job read-only",
		chromedp.Navigate(env.URL+"/admin/jobs/shard-1/"+strconv.FormatInt(failed, 10)),
		chromedp.WaitVisible(`#state`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('.actions button, button.retry, button.cancel, button.delete').length`, &buttons),
		chromedp.Text(`#role`, &role, chromedp.ByQuery),
	)
	if buttons != 0 || role != "read-only" {
		t.Errorf("read-only user sees %d action buttons (role %q)", buttons, role)
	}
	shot(t, ro, dir, "job-read-only.png")
	var tenantLines int
	run(t, ro, "tenants page", chromedp.Navigate(env.URL+"/admin/tenants"), chromedp.WaitVisible(`#tenants`, chromedp.ByQuery),
		chromedp.Text(`#tenants tbody`, &table, chromedp.ByQuery),
		chromedp.WaitVisible(`#chart-tenant-refusals`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#chart-tenant-refusals g.series').length`, &tenantLines))
	if !strings.HasPrefix(strings.TrimSpace(table), "initech") {
		t.Errorf("tenants table should start with initech, the most refused:\n%s", table)
	}
	if !strings.Contains(table, "/ 8") || !strings.Contains(table, "/ 32") {
		t.Errorf("tenants table lacks in flight against the plans' caps of 8 and 32:\n%s", table)
	}
	if tenantLines != 3 {
		t.Errorf("refusals chart has %d tenants, want initech, acme and umbrella", tenantLines)
	}
	shot(t, ro, dir, "tenants.png")
	var busy string
	run(t, ro, "cells page", chromedp.Navigate(env.URL+"/admin/cells"), chromedp.WaitVisible(`#shards`, chromedp.ByQuery),
		chromedp.Text(`#lanes-busy`, &busy, chromedp.ByQuery))
	if !strings.Contains(busy, "4 of 12") {
		t.Errorf("cells page busy workers = %q, want 4 of 12", busy)
	}
	shot(t, ro, dir, "cells.png")
}
