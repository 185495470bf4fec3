package browser

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/plans"
)

// TestTenantPlanInBrowser: an operator opens Tenants, moves acme from free
// to pro in acme's form, sees pro's limits on the page the save leads to,
// and the tenant table in the control database holds the change.
func TestTenantPlanInBrowser(t *testing.T) {
	spec := []config.Plan{
		{Name: "free", MaxConcurrentRequests: 4, MaxDBConnections: 1, RatePerSecond: 5, Burst: 10, Jobs: config.PlanJobs{MaxConcurrent: 1, Weight: 1}},
		{Name: "pro", MaxConcurrentRequests: 32, MaxDBConnections: 4, RatePerSecond: 50, Burst: 100, Jobs: config.PlanJobs{MaxConcurrent: 4, Weight: 4}},
	}
	env := consoletest.New(t, consoletest.Options{Plans: spec, Configure: func(c *console.Config) {
		c.InFlight = func(string) (int64, int64) { return 3, 99 }
	}})
	ctx := context.Background()
	free := "free"
	if _, _, err := env.Plans.Apply(ctx, "acme", "test", plans.Change{Plan: &free}); err != nil {
		t.Fatal(err)
	}
	env.LimitCounts.Add("acme", console.ResourceRate, false)

	op := newBrowser(t)
	login(t, op, env.URL, consoletest.OperatorToken)
	acmeRow := `tr[data-tenant="acme"]`
	form := `form.tenant-plan[data-tenant="acme"]`
	var limits, plan, inFlight string
	follow(t, op, "open Tenants", `nav a[href="/admin/tenants"]`,
		chromedp.WaitVisible(`#tenants`, chromedp.ByQuery),
		chromedp.Text(acmeRow+` td.limits`, &limits, chromedp.ByQuery),
		chromedp.Text(acmeRow+` td.plan`, &plan, chromedp.ByQuery),
	)
	if !strings.HasPrefix(plan, "free") || !strings.Contains(limits, "requests 4") {
		t.Fatalf("before the change acme is on %q with limits %q, want free's", plan, limits)
	}
	run(t, op, "open acme's form and pick pro",
		chromedp.Click(`tr.edit details:has(`+form+`) summary`, chromedp.ByQuery),
		chromedp.WaitVisible(form+` select[name="plan"]`, chromedp.ByQuery),
		chromedp.SetValue(form+` select[name="plan"]`, "pro", chromedp.ByQuery),
	)
	follow(t, op, "save acme's plan", form+` button.save`,
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(acmeRow+` td.limits`, &limits, chromedp.ByQuery),
		chromedp.Text(acmeRow+` td.plan`, &plan, chromedp.ByQuery),
		chromedp.Text(acmeRow+` td.in-flight`, &inFlight, chromedp.ByQuery),
	)
	if !strings.HasPrefix(plan, "pro") {
		t.Errorf("after the save acme's plan shows %q, want pro", plan)
	}
	for _, want := range []string{"requests 32", "db 4", "rate 50", "burst 100", "job cap 4", "weight 4"} {
		if !strings.Contains(limits, want) {
			t.Errorf("after the save acme's limits show %q, lacking %q", limits, want)
		}
	}
	if inFlight != "3 / 32" {
		t.Errorf("acme in flight shows %q, want 3 / 32 (pro's cap)", inFlight)
	}

	// The table itself, read by a store of its own (another process).
	other := plans.NewStore(env.Pool("control"), env.Plans.Catalog(), plans.Options{Log: slog.New(slog.DiscardHandler)})
	if err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	row, ok := other.Snapshot().Row("acme")
	if !ok || row.Plan != "pro" || !strings.HasPrefix(row.UpdatedBy, "console:session:") {
		t.Errorf("the tenant table's acme row = %+v (found %v), want pro updated by the console session", row, ok)
	}
	if e := other.Resolve("acme", ""); e.Plan != "pro" || e.Limits.MaxConcurrentRequests != 32 {
		t.Errorf("another process resolves acme to %+v, want pro", e)
	}
}
