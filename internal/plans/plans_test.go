package plans

import (
	"testing"

	"github.com/cellgate/cellgate/internal/config"
)

// specWithPlans is tenancy with free/pro/enterprise, default free.
func specWithPlans() config.Config {
	var c config.Config
	c.Tenancy.Enabled = true
	c.Tenancy.Plans = []config.Plan{
		{Name: "free", MaxConcurrentRequests: 4, MaxDBConnections: 1, RatePerSecond: 5, Burst: 10, Jobs: config.PlanJobs{MaxConcurrent: 1, Weight: 1}},
		{Name: "pro", MaxConcurrentRequests: 32, MaxDBConnections: 4, RatePerSecond: 50, Burst: 100, Jobs: config.PlanJobs{MaxConcurrent: 4, Weight: 4}},
		{Name: "enterprise", MaxConcurrentRequests: 128, MaxDBConnections: 16, Jobs: config.PlanJobs{MaxConcurrent: 16, Weight: 16}},
	}
	c.Tenancy.DefaultPlan = "free"
	return c
}

func catalog(t testing.TB) *Catalog {
	t.Helper()
	cat, err := NewCatalog(specWithPlans())
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestImplicitPlanFromTopLevelFields(t *testing.T) {
	var c config.Config
	c.Tenancy.MaxConcurrentRequests, c.Tenancy.RatePerSecond, c.Tenancy.Burst = 8, 2, 3
	c.Jobs.Tenants.MaxConcurrent = 2
	cat, err := NewCatalog(c)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSnapshot(cat, nil, 0)
	e := s.Resolve("acme", "")
	want := Limits{MaxConcurrentRequests: 8, RatePerSecond: 2, Burst: 3, JobsMaxConcurrent: 2, JobsWeight: 1}
	if e.Plan != config.ImplicitPlan || e.Limits != want {
		t.Fatalf("got %+v, want plan default with %+v", e, want)
	}
}

func TestCatalogErrorsNameThePath(t *testing.T) {
	c := specWithPlans()
	c.Tenancy.DefaultPlan = "gold"
	if _, err := NewCatalog(c); err == nil || err.Error() != `tenancy.default_plan: "gold" is not one of tenancy.plans' names (free, pro, enterprise)` {
		t.Fatalf("err = %v", err)
	}
	c = specWithPlans()
	c.Tenancy.Plans[1].Jobs.Weight = 2000
	if _, err := NewCatalog(c); err == nil || err.Error() != "tenancy.plans[1] (pro).jobs.weight: must be from 1 to 1000, got 2000" {
		t.Fatalf("err = %v", err)
	}
	c = specWithPlans()
	c.Tenancy.Plans[2].Name = "free"
	if _, err := NewCatalog(c); err == nil || err.Error() != `tenancy.plans[2].name: "free" is used twice` {
		t.Fatalf("err = %v", err)
	}
}

func TestResolvePrecedence(t *testing.T) {
	cat := catalog(t)
	rows := []Row{
		{Tenant: "acme", Plan: "pro"},
		{Tenant: "clamped", Plan: "enterprise", Overrides: map[Field]Override{MaxConcurrentRequests: {Value: 2, Enforce: true}}},
		{Tenant: "shadowed", Plan: "pro", Overrides: map[Field]Override{MaxConcurrentRequests: {Value: 3, Enforce: false}}},
		{Tenant: "gone", Plan: "platinum"},
	}
	s, errs := NewSnapshot(cat, rows, 1)
	if len(errs) != 1 {
		t.Fatalf("errs = %v, want one for the unknown plan", errs)
	}
	pro, _ := cat.Plan("pro")
	ent, _ := cat.Plan("enterprise")
	free, _ := cat.Plan("free")
	for _, c := range []struct {
		tenant, claim, plan string
		requests            int
	}{
		{"nobody", "", "free", free.MaxConcurrentRequests},              // default plan
		{"acme", "", "pro", pro.MaxConcurrentRequests},                  // table
		{"acme", "enterprise", "enterprise", ent.MaxConcurrentRequests}, // claim over table
		{"acme", "platinum", "pro", pro.MaxConcurrentRequests},          // unknown claim ignored
		{"clamped", "", "enterprise", 2},                                // override over table
		{"clamped", "pro", "pro", 2},                                    // override over claim
		{"shadowed", "", "pro", pro.MaxConcurrentRequests},              // shadow: plan's value in force
		{"gone", "", "free", free.MaxConcurrentRequests},                // unknown table plan → default
	} {
		e := s.Resolve(c.tenant, c.claim)
		if e.Plan != c.plan || e.Limits.MaxConcurrentRequests != c.requests {
			t.Errorf("Resolve(%q, %q) = plan %s cap %d, want %s cap %d", c.tenant, c.claim, e.Plan, e.Limits.MaxConcurrentRequests, c.plan, c.requests)
		}
	}
	e := s.Resolve("shadowed", "")
	if v, ok := e.HasShadow(MaxConcurrentRequests); !ok || v != 3 {
		t.Fatalf("shadow = %v %v, want 3 true", v, ok)
	}
	if _, ok := s.Resolve("clamped", "").HasShadow(MaxConcurrentRequests); ok {
		t.Fatal("an enforced override reads as shadow")
	}
}

func TestResolveAllocatesNothing(t *testing.T) {
	cat := catalog(t)
	s, _ := NewSnapshot(cat, []Row{{Tenant: "clamped", Plan: "pro", Overrides: map[Field]Override{Burst: {Value: 2, Enforce: true}}}}, 1)
	var sink Effective
	if n := testing.AllocsPerRun(1000, func() { sink = s.Resolve("clamped", "enterprise") }); n != 0 {
		t.Fatalf("%v allocs per Resolve", n)
	}
	_ = sink
}

func TestFieldCheck(t *testing.T) {
	for _, c := range []struct {
		f   Field
		v   float64
		bad bool
	}{
		{MaxConcurrentRequests, 0, false}, {MaxConcurrentRequests, -1, true}, {MaxConcurrentRequests, 1.5, true},
		{RatePerSecond, 0.5, false}, {JobsWeight, 0, true}, {JobsWeight, 1000, false}, {JobsWeight, 1001, true},
	} {
		if err := c.f.Check(c.v); (err != nil) != c.bad {
			t.Errorf("%s=%v: err %v, want bad=%v", c.f, c.v, err, c.bad)
		}
	}
	if _, err := ParseField("jobs.weights"); err == nil {
		t.Fatal("ParseField accepted an unknown field")
	}
}

func BenchmarkResolve(b *testing.B) {
	cat := catalog(b)
	s, _ := NewSnapshot(cat, []Row{{Tenant: "acme", Plan: "pro"}}, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Resolve("acme", "")
	}
}
