package bulkhead

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/tenant"
)

func TestLimiterIsExact(t *testing.T) {
	l, err := NewLimiter(3)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if l.TryAcquire() {
					n := l.InFlight()
					mu.Lock()
					peak = max(peak, n)
					mu.Unlock()
					l.Release()
				}
			}
		}()
	}
	wg.Wait()
	if peak > 3 || l.InFlight() != 0 {
		t.Fatalf("peak %d (cap 3), in flight after %d", peak, l.InFlight())
	}
	if _, err := NewLimiter(-1); err == nil {
		t.Fatal("negative max accepted")
	}
	if _, err := AdmissionWithConfig(AdmissionConfig{}); err == nil {
		t.Fatal("AdmissionConfig without a Limiter accepted")
	}
}

// chainEcho is fake tenancy → tenant bulkhead → server admission → h.
func chainEcho(t *testing.T, eng *admission.Engine, l *Limiter, m *Metrics, h echo.HandlerFunc) *echo.Echo {
	t.Helper()
	tb, err := TenantWithConfig(TenantConfig{Requests: eng, Rejections: m.RequestRejections})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := AdmissionWithConfig(AdmissionConfig{
		Limiter:    l,
		Rejections: m.ServerRejections,
		Skipper:    func(c echo.Context) bool { return c.Path() == "/public" },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.GET("/x", h, recoverMW, fakeTenancy, tb, adm)
	e.GET("/public", h, adm)
	return e
}

// TestOrderTenantBeforeServer: with a tenant cap of 1 and a server cap of
// 2, a second request of the same tenant is refused by its bulkhead and
// never takes a server permit; a second tenant fills the server, and a
// third is refused by the server.
func TestOrderTenantBeforeServer(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
	l, _ := NewLimiter(2)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, l)
	if err != nil {
		t.Fatal(err)
	}
	var e *echo.Echo
	got := map[string]int{}
	var serverInFlight []int64
	e = chainEcho(t, eng, l, m, func(c echo.Context) error {
		serverInFlight = append(serverInFlight, l.InFlight())
		switch c.QueryParam("step") {
		case "1":
			got["acme again"] = do(e, "GET", "/x", "acme").Code
			serverInFlight = append(serverInFlight, l.InFlight()) // still 1
			got["globex"] = do(e, "GET", "/x?step=2", "globex").Code
		case "2":
			rec := do(e, "GET", "/x", "initech")
			got["initech"] = rec.Code
			if rec.Header().Get("Retry-After") != "1" || decode(t, rec)["code"] != "server_overloaded" {
				t.Errorf("server refusal: %v %s", rec.Header(), rec.Body)
			}
			got["public"] = do(e, "GET", "/public", "").Code
		}
		return c.NoContent(204)
	})
	if rec := do(e, "GET", "/x?step=1", "acme"); rec.Code != 204 {
		t.Fatalf("first: %d", rec.Code)
	}
	want := map[string]int{"acme again": 503, "globex": 204, "initech": 503, "public": 204}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
	// handler of acme (1), acme-again checkpoint (1), globex (2), public (2: not counted).
	if w := []int64{1, 1, 2, 2}; len(serverInFlight) != 4 || serverInFlight[0] != w[0] || serverInFlight[1] != w[1] || serverInFlight[2] != w[2] || serverInFlight[3] != w[3] {
		t.Fatalf("server in flight seen: %v, want %v", serverInFlight, w)
	}
	if testutil.ToFloat64(m.RequestRejections) != 1 || testutil.ToFloat64(m.ServerRejections) != 1 {
		t.Fatalf("rejections: tenant %v server %v, want 1 and 1",
			testutil.ToFloat64(m.RequestRejections), testutil.ToFloat64(m.ServerRejections))
	}
	if l.InFlight() != 0 || eng.InFlight() != 0 {
		t.Fatalf("leak: server %d tenant %d", l.InFlight(), eng.InFlight())
	}
}

// TestOneGuardReleasesBoth: with both middlewares, writing the head gives
// back the tenant and the server permit at once.
func TestOneGuardReleasesBoth(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 4 })
	l, _ := NewLimiter(4)
	m, _ := NewMetrics(prometheus.NewRegistry(), l)
	var before, after [2]int64
	var nested bool
	e := chainEcho(t, eng, l, m, func(c echo.Context) error {
		_, nested = c.Response().Writer.(*guard).ResponseWriter.(*guard)
		before = [2]int64{eng.InFlight(), l.InFlight()}
		c.Response().WriteHeader(200)
		after = [2]int64{eng.InFlight(), l.InFlight()}
		return nil
	})
	do(e, "GET", "/x", "acme")
	if before != [2]int64{1, 1} || after != [2]int64{0, 0} {
		t.Fatalf("tenant/server in flight before %v after %v the head", before, after)
	}
	if nested {
		t.Fatal("the two middlewares stacked two guards; one should carry both permits")
	}
}

func TestMetricsLint(t *testing.T) {
	l, _ := NewLimiter(8)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, l)
	if err != nil {
		t.Fatal(err)
	}
	m.RequestRejections.Inc()
	m.DBRejections.Inc()
	m.ServerRejections.Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []prometheus.Collector{m.RequestRejections, m.DBRejections, m.ServerRejections} {
		more, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, more...)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "tenant" {
					t.Errorf("%s has a tenant label", mf.GetName())
				}
			}
		}
	}
	if n := testutil.CollectAndCount(reg, "cellgate_tenant_bulkhead_rejections_total"); n != 2 {
		t.Fatalf("rejection series: %d, want kind=request and kind=db", n)
	}
}

// BenchmarkHeadRelease compares the two ways to give a permit back when the
// head is written: the pooled writer wrapper this package uses, and Echo's
// Response.Before hook (plus a deferred release for handlers that write
// nothing). Both reset the Echo context per iteration, as Echo does per
// request.
func BenchmarkHeadRelease(b *testing.B) {
	e := echo.New()
	l, _ := NewLimiter(0)
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	c := e.NewContext(req, w)
	res := c.Response()
	b.Run("wrapper", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Reset(req, w) // as in before-hook: Echo resets its context per request
			func() {
				l.TryAcquire()
				g, installed := install(res, heldServer)
				g.server = l
				g.held.Or(heldServer)
				defer g.finish(res, heldServer, installed)
				res.WriteHeader(200)
			}()
		}
	})
	b.Run("before-hook", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Reset(req, w) // Echo does this per request: the hook list starts empty
			func() {
				l.TryAcquire()
				var once releaseOnce
				once.l = l
				res.Before(once.release)
				defer once.release()
				res.WriteHeader(200)
			}()
		}
	})
	if l.InFlight() != 0 {
		b.Fatal("leak")
	}
}

type releaseOnce struct {
	l    *Limiter
	done bool
}

func (r *releaseOnce) release() {
	if !r.done {
		r.done = true
		r.l.Release()
	}
}

var _ http.Flusher = (*guard)(nil)
var _ http.Hijacker = (*guard)(nil)

// BenchmarkMiddlewares runs the tenant bulkhead (request cap), the server
// admission and a handler that writes the head, on a reused Echo context
// whose request already carries its tenant: the request path of this
// package alone. It allocates nothing.
func BenchmarkMiddlewares(b *testing.B) {
	eng := newEngine(b, func(c *admission.Config) { c.MaxConcurrent = 1000 })
	l, _ := NewLimiter(1000)
	tb, _ := TenantWithConfig(TenantConfig{Requests: eng})
	adm, _ := AdmissionWithConfig(AdmissionConfig{Limiter: l})
	h := tb(adm(func(c echo.Context) error { c.Response().WriteHeader(204); return nil }))
	e := echo.New()
	req := httptest.NewRequest("GET", "/", nil)
	req = req.WithContext(tenant.With(req.Context(), "acme"))
	w := httptest.NewRecorder()
	c := e.NewContext(req, w)
	b.ReportAllocs()
	for b.Loop() {
		c.Reset(req, w)
		if err := h(c); err != nil {
			b.Fatal(err)
		}
	}
	if l.InFlight() != 0 || eng.InFlight() != 0 {
		b.Fatal("leak")
	}
}
