package bulkhead

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
)

// tenantEcho returns Echo with recover → fake tenancy → tenant bulkhead
// over engine on GET /x served by h.
func tenantEcho(t *testing.T, cfg TenantConfig, h echo.HandlerFunc) *echo.Echo {
	t.Helper()
	mw, err := TenantWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.GET("/x", h, recoverMW, fakeTenancy, mw)
	return e
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body, err)
	}
	return body
}

// TestTenantCapAnswers503 holds one request of a tenant at a cap of 1 and
// sends a second from inside the first handler: the second is refused with
// 503, Retry-After: 1 and a JSON body; another tenant is unaffected.
func TestTenantCapAnswers503(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
	rej := counter()
	var e *echo.Echo
	var inner, other *httptest.ResponseRecorder
	e = tenantEcho(t, TenantConfig{Requests: eng, Rejections: rej}, func(c echo.Context) error {
		if c.QueryParam("nest") != "" {
			inner = do(e, "GET", "/x", "acme")
			other = do(e, "GET", "/x", "globex")
		}
		return c.String(200, "ok")
	})
	if rec := do(e, "GET", "/x?nest=1", "acme"); rec.Code != 200 {
		t.Fatalf("first request: %d", rec.Code)
	}
	if inner.Code != http.StatusServiceUnavailable || inner.Header().Get("Retry-After") != "1" {
		t.Fatalf("second request of acme: %d Retry-After=%q", inner.Code, inner.Header().Get("Retry-After"))
	}
	if b := decode(t, inner); b["code"] != "tenant_overloaded" || b["detail"] == "" || b["type"] != "about:blank" {
		t.Fatalf("body: %v", b)
	}
	if other.Code != 200 {
		t.Fatalf("another tenant: %d", other.Code)
	}
	if got := testutil.ToFloat64(rej); got != 1 {
		t.Fatalf("rejections = %v, want 1", got)
	}
	if n := eng.InFlight(); n != 0 {
		t.Fatalf("in flight after all returned: %d", n)
	}
}

// TestPermitGoesBackWithTheHead: every way of starting the response gives
// the permit back before the handler returns.
func TestPermitGoesBackWithTheHead(t *testing.T) {
	starts := map[string]func(c echo.Context) error{
		"WriteHeader": func(c echo.Context) error { c.Response().WriteHeader(200); return nil },
		"Write":       func(c echo.Context) error { _, err := c.Response().Write([]byte("x")); return err },
		"Flush":       func(c echo.Context) error { c.Response().Flush(); return nil },
		"JSON":        func(c echo.Context) error { return c.JSON(200, map[string]int{"a": 1}) },
		"raw Writer":  func(c echo.Context) error { c.Response().Writer.WriteHeader(204); return nil },
		"ResponseController": func(c echo.Context) error {
			return http.NewResponseController(c.Response()).Flush()
		},
		"Hijack": func(c echo.Context) error {
			conn, _, err := c.Response().Hijack()
			if err == nil {
				conn.Close()
			}
			return err
		},
	}
	for name, start := range starts {
		t.Run(name, func(t *testing.T) {
			eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
			var before, after int64 = -1, -1
			e := tenantEcho(t, TenantConfig{Requests: eng}, func(c echo.Context) error {
				before = eng.InFlightOf("acme")
				if err := start(c); err != nil {
					return err
				}
				after = eng.InFlightOf("acme")
				return nil
			})
			req := httptest.NewRequest("GET", "/x", nil)
			req.Header.Set("X-Tenant", "acme")
			w := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
			e.ServeHTTP(w, req)
			if before != 1 || after != 0 {
				t.Fatalf("in flight before/after the head: %d/%d, want 1/0", before, after)
			}
			if name == "Hijack" && !w.hijacked {
				t.Fatal("Hijack did not reach the underlying writer")
			}
			if eng.InFlight() != 0 {
				t.Fatal("permit leaked")
			}
		})
	}
}

// TestInformationalStatusKeepsPermit: a 103 Early Hints is not the head.
func TestInformationalStatusKeepsPermit(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
	var after int64
	e := tenantEcho(t, TenantConfig{Requests: eng}, func(c echo.Context) error {
		c.Response().Writer.WriteHeader(http.StatusEarlyHints)
		after = eng.InFlightOf("acme")
		return nil
	})
	do(e, "GET", "/x", "acme")
	if after != 1 {
		t.Fatalf("in flight after 103: %d, want 1", after)
	}
	if eng.InFlight() != 0 {
		t.Fatal("permit leaked")
	}
}

// TestPermitGoesBackOnReturnPanicAndDeadline: a handler that writes
// nothing returns its permit when it returns an error, panics, or gives up
// on its context's deadline.
func TestPermitGoesBackOnReturnPanicAndDeadline(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
	e := tenantEcho(t, TenantConfig{Requests: eng}, func(c echo.Context) error {
		switch c.QueryParam("do") {
		case "panic":
			panic("boom")
		case "deadline":
			ctx, cancel := context.WithTimeout(c.Request().Context(), time.Millisecond)
			defer cancel()
			<-ctx.Done()
			return ctx.Err()
		}
		return errors.New("failed")
	})
	for _, q := range []string{"error", "panic", "deadline"} {
		rec := do(e, "GET", "/x?do="+q, "acme")
		if rec.Code != 500 {
			t.Fatalf("%s: status %d", q, rec.Code)
		}
		if n := eng.InFlight(); n != 0 {
			t.Fatalf("%s: %d permits in flight after the handler ended", q, n)
		}
	}
}

func TestNoTenantAndSkippedAreNotCounted(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 1 })
	var seen []int64
	e := tenantEcho(t, TenantConfig{
		Requests: eng,
		Skipper:  func(c echo.Context) bool { return c.QueryParam("public") != "" },
	}, func(c echo.Context) error {
		seen = append(seen, eng.InFlight())
		return c.NoContent(204)
	})
	do(e, "GET", "/x", "")
	do(e, "GET", "/x?public=1", "acme")
	if len(seen) != 2 || seen[0] != 0 || seen[1] != 0 {
		t.Fatalf("in flight seen by uncounted requests: %v", seen)
	}
	if eng.Accounts() != 0 {
		t.Fatalf("uncounted requests created %d accounts", eng.Accounts())
	}
}

func TestRateLimitAnswers429(t *testing.T) {
	clock := admission.NewManualClock()
	eng := newEngine(t, func(c *admission.Config) { c.Rate, c.Burst, c.Clock = 1, 1, clock })
	rej := counter()
	e := tenantEcho(t, TenantConfig{Requests: eng, Rejections: rej}, func(c echo.Context) error { return c.NoContent(204) })
	if rec := do(e, "GET", "/x", "acme"); rec.Code != 204 {
		t.Fatalf("first: %d", rec.Code)
	}
	rec := do(e, "GET", "/x", "acme")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || decode(t, rec)["code"] != "tenant_rate_limited" {
		t.Fatalf("over rate: %d Retry-After=%q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	clock.Advance(time.Second)
	if rec := do(e, "GET", "/x", "acme"); rec.Code != 204 {
		t.Fatalf("after a second: %d", rec.Code)
	}
	if testutil.ToFloat64(rej) != 0 {
		t.Fatal("a rate refusal counted as a bulkhead rejection")
	}
	if RateRejection(0.25).RetryAfter != 4 {
		t.Fatalf("Retry-After at 0.25/s = %d, want 4", RateRejection(0.25).RetryAfter)
	}
}

func TestQuotaAnswers429WithoutRetryAfter(t *testing.T) {
	eng := newEngine(t, func(c *admission.Config) { c.Funding, c.LeaseSize = 2, 1 })
	e := tenantEcho(t, TenantConfig{Requests: eng}, func(c echo.Context) error { return c.NoContent(204) })
	for i := 0; i < 2; i++ {
		if rec := do(e, "GET", "/x", "acme"); rec.Code != 204 {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	rec := do(e, "GET", "/x", "acme")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "" || decode(t, rec)["code"] != "tenant_quota_exhausted" {
		t.Fatalf("over quota: %d Retry-After=%q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}

// TestWriterKeepsInterfaces: inside the handler the wrapped writer still
// flushes, hijacks and unwraps to the original.
func TestWriterKeepsInterfaces(t *testing.T) {
	eng := newEngine(t, nil)
	var orig http.ResponseWriter
	e := tenantEcho(t, TenantConfig{Requests: eng}, func(c echo.Context) error {
		w := c.Response().Writer
		if _, ok := w.(http.Flusher); !ok {
			t.Error("not an http.Flusher")
		}
		if _, ok := w.(http.Hijacker); !ok {
			t.Error("not an http.Hijacker")
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok || u.Unwrap() != orig {
			t.Error("Unwrap does not return the server's writer")
		}
		return c.NoContent(204)
	})
	rec := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
	orig = rec
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("X-Tenant", "acme")
	e.ServeHTTP(rec, req)
	if rec.Code != 204 {
		t.Fatalf("status %d", rec.Code)
	}
}

// TestDBBindingLivesForTheHandler: the accessor Shard hands the handler
// takes database permits, capped, while the handler runs and none after it
// returns; a tenant of another cell is refused before the handler.
func TestDBBindingLivesForTheHandler(t *testing.T) {
	dbEng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 2 })
	rej := counter()
	permits, err := NewDBPermits(dbEng, rej)
	if err != nil {
		t.Fatal(err)
	}
	var kept shards.Accessor
	var errs []error
	// No databases: the accessor cannot check out, but its permits are
	// what the test looks at, through Permits.
	e := echo.New()
	e.GET("/x", fakeTenancy(permits.Shard(nil, func(c echo.Context, sh shards.Accessor) error {
		kept = sh
		if sh.Tenant() != "acme" || !errors.Is(sh.Err(), shards.ErrNoDatabases) {
			t.Errorf("accessor of %q, err %v", sh.Tenant(), sh.Err())
		}
		b := sh.Permits()
		p1, err1 := b.Acquire()
		p2, err2 := b.Acquire()
		_, err3 := b.Acquire()
		errs = []error{err1, err2, err3}
		p1.Release()
		p2.Release()
		return c.NoContent(204)
	})))
	do(e, "GET", "/x", "acme")
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrTenantDBOverloaded) {
		t.Fatalf("acquire errors: %v", errs)
	}
	if testutil.ToFloat64(rej) != 1 {
		t.Fatalf("db rejections = %v, want 1", testutil.ToFloat64(rej))
	}
	if kept.Permits().(*DBBinding).Live() {
		t.Fatal("binding still live after the handler returned")
	}
	p, err := kept.Permits().Acquire()
	if err != nil || p.Held() || dbEng.InFlight() != 0 {
		t.Fatalf("after the request: permit held=%v err=%v in flight=%d", p.Held(), err, dbEng.InFlight())
	}
	var nilBinding *DBBinding
	if p, err := nilBinding.Acquire(); err != nil || p.Held() {
		t.Fatal("a nil binding must take nothing and refuse nothing")
	}
	var off *DBPermits // tenancy.max_db_connections = 0
	e.GET("/off", fakeTenancy(off.Shard(nil, func(c echo.Context, sh shards.Accessor) error {
		if sh.Permits() != nil {
			t.Error("permits bound with the database cap off")
		}
		return c.NoContent(204)
	})))
	if rec := do(e, "GET", "/off", "acme"); rec.Code != 204 {
		t.Fatalf("cap off: status %d", rec.Code)
	}
}

// TestShardRefusesOtherCell: a tenant whose slot another cell owns gets
// 421 before the handler runs, and holds no database permit.
func TestShardRefusesOtherCell(t *testing.T) {
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN"},
		Shards: []config.Shard{{Name: "shard-0", DSNEnv: "DSN", Slots: []string{"0-8191"}},
			{Name: "shard-1", DSNEnv: "DSN", Slots: []string{"8192-16383"}}},
	}
	cells := []config.Cell{{Name: "cell-1", Slots: []string{"0-8191"}}, {Name: "cell-2", Slots: []string{"8192-16383"}}}
	// Pools connect lazily: nothing listens at port 1, and nothing dials.
	set, err := shards.OpenCell(context.Background(), db, cells, "cell-2",
		func(string) string { return "postgres://x@127.0.0.1:1/db" })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	dbEng := newEngine(t, func(c *admission.Config) { c.MaxConcurrent = 2 })
	permits, _ := NewDBPermits(dbEng, nil)
	e := echo.New()
	called := 0
	e.GET("/x", fakeTenancy(permits.Shard(set, func(c echo.Context, sh shards.Accessor) error {
		called++
		if sh.Err() != nil || sh.Shard().Name != "shard-1" {
			t.Errorf("own tenant: %v", sh.Err())
		}
		return c.NoContent(204)
	})))
	if rec := do(e, "GET", "/x", "{user1}.following"); rec.Code != http.StatusMisdirectedRequest || decode(t, rec)["code"] != "tenant_other_cell" { // slot 8106
		t.Fatalf("other cell's tenant: %d %s", rec.Code, rec.Body)
	}
	if rec := do(e, "GET", "/x", "123456789"); rec.Code != 204 || called != 1 { // slot 12739
		t.Fatalf("own tenant: %d, handler called %d times", rec.Code, called)
	}
	if dbEng.InFlight() != 0 {
		t.Fatalf("%d database permits held", dbEng.InFlight())
	}
}

func TestRejectionHead(t *testing.T) {
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest("HEAD", "/", nil), rec)
	if err := ErrServerOverloaded.Write(c); err != ErrServerOverloaded {
		t.Fatal(err)
	}
	if rec.Code != 503 || rec.Body.Len() != 0 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("HEAD: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
}

// TestOnRejectHearsRefusedTenants: OnReject is told the tenant of each
// refusal (here for rate), and of nothing admitted.
func TestOnRejectHearsRefusedTenants(t *testing.T) {
	clock := admission.NewManualClock()
	eng := newEngine(t, func(c *admission.Config) { c.Rate, c.Burst, c.Clock = 1, 1, clock })
	var heard []string
	e := tenantEcho(t, TenantConfig{Requests: eng, OnReject: func(id string) { heard = append(heard, id) }},
		func(c echo.Context) error { return c.NoContent(204) })
	for _, ten := range []string{"acme", "acme", "globex", "acme"} {
		do(e, "GET", "/x", ten)
	}
	if len(heard) != 2 || heard[0] != "acme" || heard[1] != "acme" {
		t.Fatalf("OnReject heard %v, want acme twice", heard)
	}
}
