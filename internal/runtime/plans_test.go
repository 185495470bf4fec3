package runtime

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

// plansCell is a control database with the tenant table and a config with
// free (1 request) and pro (3 requests, 50/s) plans.
func plansCell(t *testing.T) (config.Config, *pgxpool.Pool, *plans.Catalog) {
	t.Helper()
	cfg := testConfig()
	cfg.Tenancy.Plans = []config.Plan{
		{Name: "free", MaxConcurrentRequests: 1, Jobs: config.PlanJobs{Weight: 1}},
		{Name: "pro", MaxConcurrentRequests: 3, RatePerSecond: 50, Burst: 50, Jobs: config.PlanJobs{Weight: 4}},
	}
	cfg.Tenancy.DefaultPlan = "free"
	dsn := testpg.CreateDB(t, "rtplans")
	ctx := context.Background()
	if err := plans.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cat, err := plans.NewCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, pool, cat
}

// plannedServer is one process of the cell: a store following the table
// and a server enforcing it, with a tenant route that blocks until release
// is closed.
type plannedServer struct {
	s       *Server
	store   *plans.Store
	reg     *prometheus.Registry
	release chan struct{}
}

func newPlannedServer(t *testing.T, cfg config.Config, pool *pgxpool.Pool, cat *plans.Catalog) *plannedServer {
	t.Helper()
	return newPlannedServerWith(t, cfg, pool, cat, nil)
}

// newPlannedServerWith is newPlannedServer with Options.OnTenantLimit.
func newPlannedServerWith(t *testing.T, cfg config.Config, pool *pgxpool.Pool, cat *plans.Catalog, onLimit func(string, string, bool)) *plannedServer {
	t.Helper()
	store := plans.NewStore(pool, cat, plans.Options{Log: discardLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = store.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for !store.Loaded() {
		if time.Now().After(deadline) {
			t.Fatal("store did not load")
		}
		time.Sleep(10 * time.Millisecond)
	}
	reg := newRegistry()
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: reg, Getenv: func(string) string { return "" }, Plans: store, OnTenantLimit: onLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.bulk.close)
	p := &plannedServer{s: s, store: store, reg: reg, release: make(chan struct{})}
	s.Tenant("GET", "/hold", func(c echo.Context, _ shards.Accessor) error {
		<-p.release
		return c.NoContent(204)
	})
	s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return c.NoContent(204) })
	return p
}

// hold starts n blocking requests of tenant and waits until they are in
// flight or refused; it returns the refused count and a wait for the rest.
func (p *plannedServer) hold(t *testing.T, tenant string, n int) (refused int, wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(p.s, "GET", "/hold", "", "X-Tenant-ID", tenant).Code
		}()
	}
	// Refusals answer at once; admitted requests block in the handler.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if p.s.bulk.Requests.InFlightOf(tenant)+int64(len(codes)) >= int64(n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for len(codes) > 0 {
		if c := <-codes; c == 503 {
			refused++
		}
	}
	return refused, wg.Wait
}

func TestPlansCapPerTenantPlan(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro")}); err != nil {
		t.Fatal(err)
	}
	p := newPlannedServer(t, cfg, pool, cat)
	refusedPro, waitPro := p.hold(t, "acme", 5)
	refusedFree, waitFree := p.hold(t, "initech", 3)
	if refusedPro != 2 || refusedFree != 2 {
		t.Fatalf("refused: pro %d of 5 (cap 3), free %d of 3 (cap 1); want 2 and 2", refusedPro, refusedFree)
	}
	close(p.release)
	waitPro()
	waitFree()
	waitZero(t, p.s.bulk)
	for _, c := range []struct {
		plan string
		want float64
	}{{"pro", 2}, {"free", 2}} {
		if got := testutil.ToFloat64(p.s.bulk.plan.Refusals.WithLabelValues("request", c.plan)); got != c.want {
			t.Errorf("refusals{request,%s} = %v, want %v", c.plan, got, c.want)
		}
	}
}

// TestPlansHeaderSourceCannotPickPlan: with the header source nothing the
// client sends chooses a plan: not a plan header, not a token with a plan
// claim. The tenant stays on its table plan.
func TestPlansHeaderSourceCannotPickPlan(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	p := newPlannedServer(t, cfg, pool, cat)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("X-Tenant-ID", "initech")
	req.Header.Set("X-Plan", "pro")
	req.Header.Set("Authorization", "Bearer eyJhbGciOiJub25lIn0.eyJ0ZW5hbnQiOiJpbml0ZWNoIiwicGxhbiI6InBybyJ9.")
	p.s.Echo().ServeHTTP(rec, req)
	if rec.Code != 204 {
		t.Fatalf("status %d", rec.Code)
	}
	if e := p.store.Resolve("initech", ""); e.Plan != "free" {
		t.Fatalf("plan %s after a client-chosen plan, want the default free", e.Plan)
	}
	refused, wait := p.hold(t, "initech", 2)
	close(p.release)
	wait()
	if refused != 1 {
		t.Fatalf("refused %d of 2 at free's cap 1", refused)
	}
}

// TestPlansLiveChange lowers a tenant's request cap with the tenant table
// while two processes hold its requests, and measures how long until both
// refuse at the new cap (make bench-plans: live-change-s).
func TestPlansLiveChange(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro")}); err != nil {
		t.Fatal(err)
	}
	a, b := newPlannedServer(t, cfg, pool, cat), newPlannedServer(t, cfg, pool, cat)
	ra, waitA := a.hold(t, "acme", 2)
	rb, waitB := b.hold(t, "acme", 2)
	if ra+rb != 0 {
		t.Fatalf("refused %d before the change", ra+rb)
	}
	start := time.Now()
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "oncall", plans.Change{
		Set: map[plans.Field]plans.Override{plans.MaxConcurrentRequests: {Value: 1, Enforce: true}}}); err != nil {
		t.Fatal(err)
	}
	// Each process has 2 in flight: at a cap of 1 both refuse the next.
	refusing := func(p *plannedServer) bool { return serve(p.s, "GET", "/x", "", "X-Tenant-ID", "acme").Code == 503 }
	for !(refusing(a) && refusing(b)) {
		if time.Since(start) > 2*time.Second {
			t.Fatal("the lowered cap was not in force on both processes within 2 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(start)
	t.Logf("plans: live-change-s=%.3f", d.Seconds())
	close(a.release)
	close(b.release)
	waitA()
	waitB()
}

// TestPlansShadowOverride: a shadow cap below the load's concurrency
// refuses nothing and counts what it would have refused (make bench-plans:
// shadow-refused).
func TestPlansShadowOverride(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro"),
		Set: map[plans.Field]plans.Override{plans.MaxConcurrentRequests: {Value: 1, Enforce: false}}}); err != nil {
		t.Fatal(err)
	}
	p := newPlannedServer(t, cfg, pool, cat)
	refused, wait := p.hold(t, "acme", 3)
	close(p.release)
	wait()
	shadow := testutil.ToFloat64(p.s.bulk.plan.Shadow.WithLabelValues("request", "pro"))
	if refused != 0 || shadow < 1 {
		t.Fatalf("refused %d, shadow %v; want 0 refused and shadow > 0", refused, shadow)
	}
	t.Logf("plans: shadow-refused=%d", refused)
	t.Logf("plans: shadow-counted=%v", shadow)
}

// TestPlansRateHeaders: a rate refusal is 429 with Retry-After and the
// plan's IETF RateLimit-Policy and RateLimit fields.
func TestPlansRateHeaders(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro"),
		Set: map[plans.Field]plans.Override{plans.RatePerSecond: {Value: 0.5, Enforce: true}, plans.Burst: {Value: 1, Enforce: true}}}); err != nil {
		t.Fatal(err)
	}
	p := newPlannedServer(t, cfg, pool, cat)
	if rec := serve(p.s, "GET", "/x", "", "X-Tenant-ID", "acme"); rec.Code != 204 {
		t.Fatalf("first: %d", rec.Code)
	}
	rec := serve(p.s, "GET", "/x", "", "X-Tenant-ID", "acme")
	h := rec.Header()
	if rec.Code != 429 || h.Get("Retry-After") != "2" || h.Get("RateLimit-Policy") != `"pro";q=1;w=2` || h.Get("RateLimit") != `"pro";r=0;t=2` {
		t.Fatalf("over rate: %d Retry-After=%q RateLimit-Policy=%q RateLimit=%q", rec.Code, h.Get("Retry-After"), h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}
}

func ptr(s string) *string { return &s }

// TestPlansJWTClaimPicksPlan: with the jwt source a verified token's plan
// claim puts the tenant on that plan (over the table), and the request cap
// follows it; an override still wins over the claim.
func TestPlansJWTClaimPicksPlan(t *testing.T) {
	cfg, pool, cat := plansCell(t)
	cfg.Tenancy.Source = "jwt"
	cfg.Tenancy.JWT = config.JWTSource{Algorithms: []string{"HS256"}, KeyEnv: "TEST_JWT_KEY", Claim: "tenant", PlanClaim: "plan"}
	const key = "0123456789abcdef0123456789abcdef"
	store := plans.NewStore(pool, cat, plans.Options{Log: discardLogger()})
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(k string) string { return map[string]string{"TEST_JWT_KEY": key}[k] }, Plans: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.bulk.close)
	s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return c.NoContent(204) })
	token := func(claims jwt.MapClaims) string {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	if rec := serve(s, "GET", "/x", "", "Authorization", token(jwt.MapClaims{"tenant": "acme", "plan": "pro"})); rec.Code != 204 {
		t.Fatalf("status %d %s", rec.Code, rec.Body)
	}
	if e := store.Resolve("acme", ""); e.Plan != "pro" || e.Limits.MaxConcurrentRequests != 3 {
		t.Fatalf("after a pro token: %+v", e)
	}
	if got := s.bulk.Requests.Config().Limits.Limits("acme").MaxConcurrent; got != 3 {
		t.Fatalf("request engine cap %d, want pro's 3", got)
	}
	// A token without the claim leaves the tenant where it is; a token
	// naming no plan of the spec is ignored.
	serve(s, "GET", "/x", "", "Authorization", token(jwt.MapClaims{"tenant": "initech", "plan": "platinum"}))
	if e := store.Resolve("initech", ""); e.Plan != "free" {
		t.Fatalf("unknown plan claim: %s", e.Plan)
	}
}

// TestPlansDBPermitsPerPlan: database permits follow the plan, a shadow
// database cap counts and refuses nothing, and refusals count by plan.
func TestPlansDBPermitsPerPlan(t *testing.T) {
	cfg, pool, _ := plansCell(t)
	cfg.Tenancy.Plans[0].MaxDBConnections = 1
	cfg.Tenancy.Plans[1].MaxDBConnections = 3
	cat, err := plans.NewCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro"),
		Set: map[plans.Field]plans.Override{plans.MaxDBConnections: {Value: 1, Enforce: false}}}); err != nil {
		t.Fatal(err)
	}
	p := newPlannedServer(t, cfg, pool, cat)
	acme := p.s.bulk.dbPermits.Bind("acme")
	defer acme.End()
	var held []func()
	for i := range 3 {
		permit, err := acme.Acquire()
		if err != nil {
			t.Fatalf("pro permit %d of 3: %v", i+1, err)
		}
		held = append(held, permit.Release)
	}
	if _, err := acme.Acquire(); err != bulkhead.ErrTenantDBOverloaded {
		t.Fatalf("4th pro permit: %v, want overloaded", err)
	}
	free := p.s.bulk.dbPermits.Bind("initech")
	defer free.End()
	fp, err := free.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := free.Acquire(); err == nil {
		t.Fatal("free's second permit admitted at cap 1")
	}
	fp.Release()
	for _, r := range held {
		r()
	}
	if got := testutil.ToFloat64(p.s.bulk.plan.Shadow.WithLabelValues("db", "pro")); got != 2 {
		t.Errorf("shadow{db,pro} = %v, want 2 (permits 2 and 3 over the shadow cap 1)", got)
	}
	for _, c := range []struct {
		plan string
		want float64
	}{{"pro", 1}, {"free", 1}} {
		if got := testutil.ToFloat64(p.s.bulk.plan.Refusals.WithLabelValues("db", c.plan)); got != c.want {
			t.Errorf("refusals{db,%s} = %v, want %v", c.plan, got, c.want)
		}
	}
}

// TestPlansOnTenantLimit: Options.OnTenantLimit hears each plan refusal
// and each shadow refusal with its tenant and resource (the console's
// per-tenant counts), as the per-plan counters count them.
func TestPlansOnTenantLimit(t *testing.T) {
	cfg, pool, _ := plansCell(t)
	cfg.Tenancy.Plans[1].MaxDBConnections = 2
	cat, err := plans.NewCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plans.Apply(context.Background(), pool, cat, "acme", "test", plans.Change{Plan: ptr("pro"),
		Set: map[plans.Field]plans.Override{plans.MaxConcurrentRequests: {Value: 1, Enforce: false}, plans.MaxDBConnections: {Value: 1, Enforce: false}}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events = map[string]int{}
	)
	p := newPlannedServerWith(t, cfg, pool, cat, func(tenant, resource string, shadow bool) {
		mu.Lock()
		defer mu.Unlock()
		events[fmt.Sprintf("%s/%s/%v", tenant, resource, shadow)]++
	})
	// initech is on free (1 request): its second request is refused.
	refusedFree, waitFree := p.hold(t, "initech", 2)
	// acme is on pro (3) with a shadow cap of 1: nothing refused, counted.
	refusedPro, waitPro := p.hold(t, "acme", 3)
	close(p.release)
	waitFree()
	waitPro()
	acme := p.s.bulk.dbPermits.Bind("acme")
	defer acme.End()
	var held []func()
	for range 3 {
		if permit, err := acme.Acquire(); err == nil {
			held = append(held, permit.Release)
		}
	}
	for _, r := range held {
		r()
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{
		"initech/request/false": refusedFree,
		"acme/request/true":     int(testutil.ToFloat64(p.s.bulk.plan.Shadow.WithLabelValues("request", "pro"))),
		"acme/db/false":         1,
		"acme/db/true":          1,
	}
	if refusedFree != 1 || refusedPro != 0 || want["acme/request/true"] < 1 {
		t.Fatalf("refused free %d (want 1), pro %d (want 0), shadow %d (want > 0)", refusedFree, refusedPro, want["acme/request/true"])
	}
	for k, n := range want {
		if events[k] != n {
			t.Errorf("events[%s] = %d, want %d (all: %v)", k, events[k], n, events)
		}
	}
	if len(events) != len(want) {
		t.Errorf("events = %v, want only %v", events, want)
	}
}
