package tenantmw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/probe"
	"github.com/cellgate/cellgate/internal/reqctx"
	"github.com/cellgate/cellgate/internal/tenancy"
	"github.com/cellgate/cellgate/internal/tenant"
	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// seen records what the handler observed.
type seen struct {
	called        bool
	echoID, ctxID string
	echoOK, ctxOK bool
}

// newEcho returns an Echo app with the tenancy middleware built from cfg and
// catch-all routes whose handler records what it sees.
func newEcho(tb testing.TB, cfg Config, s *seen) *echo.Echo {
	tb.Helper()
	if cfg.Tenancy.Now == nil {
		cfg.Tenancy.Now = fixedClock
	}
	mw, err := WithConfig(cfg)
	if err != nil {
		tb.Fatalf("WithConfig: %v", err)
	}
	e := echo.New()
	e.Use(mw)
	h := func(c echo.Context) error {
		s.called = true
		s.echoID, s.echoOK = FromEcho(c)
		s.ctxID, s.ctxOK = tenant.From(c.Request().Context())
		return c.NoContent(http.StatusNoContent)
	}
	e.Any("/*", h)
	return e
}

func serve(e *echo.Echo, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w
}

func TestMiddlewareStoresTenant(t *testing.T) {
	var s seen
	e := newEcho(t, Config{}, &s)
	r := httptest.NewRequest(http.MethodGet, "/orders", nil)
	r.Header.Set("X-Tenant-ID", "acme")
	w := serve(e, r)
	if w.Code != http.StatusNoContent || !s.called {
		t.Fatalf("status %d, called %v", w.Code, s.called)
	}
	if s.echoID != "acme" || !s.echoOK || s.ctxID != "acme" || !s.ctxOK {
		t.Fatalf("handler saw %+v", s)
	}
}

func TestMiddlewareErrors(t *testing.T) {
	type body struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	hs := tenancy.JWTConfig{Algorithms: []string{"HS256"}, Key: testHMACKey}
	expired := mint(t, jwt.MapClaims{"tenant": "acme", "exp": testNow.Add(-time.Minute).Unix()})
	cases := []struct {
		name      string
		cfg       Config
		prepare   func(*http.Request)
		status    int
		code      string
		challenge string
	}{
		{"header missing", Config{}, func(*http.Request) {}, 401, "tenant_missing", ""},
		{"header invalid", Config{}, func(r *http.Request) { r.Header.Set("X-Tenant-ID", "a b") }, 400, "tenant_invalid", ""},
		{"subdomain missing", Config{Tenancy: tenancy.Config{Source: tenancy.SourceSubdomain, BaseDomain: "example.com"}},
			func(r *http.Request) { r.Host = "example.com" }, 401, "tenant_missing", ""},
		{"session bad signature", Config{Tenancy: tenancy.Config{Source: tenancy.SourceSession, Session: tenancy.SessionConfig{Key: testSessionKey}}},
			func(r *http.Request) {
				r.AddCookie(&http.Cookie{Name: tenancy.DefaultSessionCookie, Value: tenancy.SignSession([]byte(strings.Repeat("x", 32)), "acme", testNow.Add(time.Hour))})
			}, 401, "tenant_unauthenticated", ""},
		{"jwt missing", Config{Tenancy: tenancy.Config{Source: tenancy.SourceJWT, JWT: hs}}, func(*http.Request) {}, 401, "tenant_missing", "Bearer"},
		{"jwt expired", Config{Tenancy: tenancy.Config{Source: tenancy.SourceJWT, JWT: hs}},
			func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+expired) }, 401, "tenant_unauthenticated", `Bearer error="invalid_token"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s seen
			e := newEcho(t, tc.cfg, &s)
			r := httptest.NewRequest(http.MethodGet, "/orders", nil)
			tc.prepare(r)
			w := serve(e, r)
			if s.called {
				t.Fatal("next handler called on a rejected request")
			}
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var b body
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&b); err != nil {
				t.Fatalf("body %q: %v", w.Body.String(), err)
			}
			if b.Code != tc.code || b.Detail == "" {
				t.Fatalf("body %+v, want code %s and a message", b, tc.code)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Fatalf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
		})
	}
}

func TestMiddlewareErrorBodyExact(t *testing.T) {
	var s seen
	e := newEcho(t, Config{}, &s)
	w := serve(e, httptest.NewRequest(http.MethodGet, "/orders", nil))
	if got, want := strings.TrimSpace(w.Body.String()), `{"type":"about:blank","title":"Unauthorized","status":401,"detail":"tenant header missing","code":"tenant_missing"}`; got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
}

func TestMiddlewareCustomErrorHandler(t *testing.T) {
	var s seen
	var got *tenancy.Error
	e := newEcho(t, Config{ErrorHandler: func(c echo.Context, err *tenancy.Error) error {
		got = err
		return c.String(http.StatusTeapot, err.Kind.Code())
	}}, &s)
	w := serve(e, httptest.NewRequest(http.MethodGet, "/orders", nil))
	if w.Code != http.StatusTeapot || got == nil || got.Kind != tenancy.KindMissing || s.called {
		t.Fatalf("status %d, err %v, called %v", w.Code, got, s.called)
	}
}

func TestMiddlewareSkipsProbesByDefault(t *testing.T) {
	for _, p := range probe.Paths() {
		var s seen
		e := newEcho(t, Config{}, &s)
		r := httptest.NewRequest(http.MethodGet, p, nil)
		r.Header.Set("X-Tenant-ID", "acme") // even with a tenant, a skipped request carries none
		w := serve(e, r)
		if w.Code != http.StatusNoContent || !s.called {
			t.Fatalf("%s: status %d called %v", p, w.Code, s.called)
		}
		if s.echoOK || s.ctxOK {
			t.Fatalf("%s: skipped request carries a tenant: %+v", p, s)
		}
	}
}

func TestMiddlewarePublicSkipper(t *testing.T) {
	skip, err := PublicSkipper("/login", "/public/*")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{ // path -> skipped
		"/login": true, "/public/a.css": true, "/public/": true, "/healthz": true, "/metrics": true,
		"/login/x": false, "/public": false, "/orders": false, "/public/../orders": false,
	}
	for p, skipped := range cases {
		var s seen
		e := newEcho(t, Config{Skipper: skip}, &s)
		w := serve(e, httptest.NewRequest(http.MethodGet, p, nil))
		want := http.StatusUnauthorized
		if skipped {
			want = http.StatusNoContent
		}
		if w.Code != want || s.called != skipped {
			t.Errorf("%s: status %d called %v, want skipped=%v", p, w.Code, s.called, skipped)
		}
	}

	// An Echo Skipper that skips nothing applies tenancy to probes too.
	var s seen
	e := newEcho(t, Config{Skipper: middleware.DefaultSkipper}, &s)
	if w := serve(e, httptest.NewRequest(http.MethodGet, "/healthz", nil)); w.Code != http.StatusUnauthorized {
		t.Fatalf("DefaultSkipper: /healthz status %d", w.Code)
	}
}

func TestFromEchoWithoutMiddleware(t *testing.T) {
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	if id, ok := FromEcho(c); ok || id != "" {
		t.Fatalf("FromEcho = %q, %v", id, ok)
	}
	c.Set("tenant", "acme") // Echo's store is not where the tenant lives
	if _, ok := FromEcho(c); ok {
		t.Fatal("FromEcho read Echo's store")
	}
	c.SetRequest(c.Request().WithContext(tenant.With(c.Request().Context(), "acme")))
	if id, ok := FromEcho(c); !ok || id != "acme" {
		t.Fatalf("FromEcho = %q, %v", id, ok)
	}
}

func TestWriteErrorNilDoesNotPanic(t *testing.T) {
	w := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), w)
	if err := WriteError(c, nil); err != nil || w.Code != http.StatusUnauthorized {
		t.Fatalf("err %v status %d", err, w.Code)
	}
}

// TestConcurrentUse backs the package's concurrency contract: one
// middleware serves many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	mw, err := WithConfig(Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(mw)
	e.GET("/x", func(c echo.Context) error { // no shared state: the status says what it saw
		if id, ok := FromEcho(c); !ok || id != c.Request().Header.Get(tenancy.DefaultHeader) {
			return c.NoContent(http.StatusInternalServerError)
		}
		return c.NoContent(http.StatusNoContent)
	})
	done := make(chan string, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 50; i++ {
				r := httptest.NewRequest(http.MethodGet, "/x", nil)
				r.Header.Set(tenancy.DefaultHeader, fmt.Sprintf("t%d", g))
				if w := serve(e, r); w.Code != http.StatusNoContent {
					done <- fmt.Sprintf("status %d", w.Code)
					return
				}
			}
			done <- ""
		}()
	}
	for g := 0; g < 8; g++ {
		if msg := <-done; msg != "" {
			t.Fatal(msg)
		}
	}
}

// The tests' fixed clock and keys.
var (
	testNow        = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	testSessionKey = []byte("0123456789abcdef0123456789abcdef")
	testHMACKey    = []byte("hmac-secret-for-tests-32-bytes!!")
)

func fixedClock() time.Time { return testNow }

// mint signs claims with the HMAC test key.
func mint(tb testing.TB, claims jwt.MapClaims) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testHMACKey)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestWithConfigNamesTheBadField: a bad extraction setting fails WithConfig
// with the tenancy package's *ConfigError, naming the field.
func TestWithConfigNamesTheBadField(t *testing.T) {
	_, err := WithConfig(Config{Tenancy: tenancy.Config{Source: tenancy.SourceJWT, JWT: tenancy.JWTConfig{Algorithms: []string{"HS256"}}}})
	var ce *tenancy.ConfigError
	if !errors.As(err, &ce) || ce.Field != "JWT.Key" {
		t.Fatalf("WithConfig: %v, want a *tenancy.ConfigError for JWT.Key", err)
	}
}

// TestMiddlewareFillsRequestContext: behind the server's request scope,
// which makes each request's own context (reqctx), the middleware puts
// the tenant in that context instead of copying the request: the handler
// gets the very request and context the scope made, and finds the tenant
// there and in contexts derived from it.
func TestMiddlewareFillsRequestContext(t *testing.T) {
	mw, err := WithConfig(Config{Tenancy: tenancy.Config{Now: fixedClock}})
	if err != nil {
		t.Fatal(err)
	}
	var scoped *http.Request
	scope := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scoped = c.Request().WithContext(reqctx.New(c.Request().Context()))
			c.SetRequest(scoped)
			return next(c)
		}
	}
	var got *http.Request
	var id, derivedID string
	e := echo.New()
	e.Use(scope, mw)
	e.GET("/*", func(c echo.Context) error {
		got = c.Request()
		id, _ = FromEcho(c)
		derived, cancel := context.WithCancel(got.Context())
		defer cancel()
		derivedID, _ = tenant.From(derived)
		return c.NoContent(http.StatusNoContent)
	})
	r := httptest.NewRequest(http.MethodGet, "/orders", nil)
	r.Header.Set("X-Tenant-ID", "acme")
	if w := serve(e, r); w.Code != http.StatusNoContent {
		t.Fatalf("status %d", w.Code)
	}
	if got != scoped || reqctx.Of(got.Context()) == nil {
		t.Error("the middleware copied the request instead of filling its own context")
	}
	if id != "acme" || derivedID != "acme" {
		t.Errorf("tenant %q, in a derived context %q; want acme", id, derivedID)
	}
}
