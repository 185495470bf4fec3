package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

func testConfig() config.Config {
	return config.Config{
		Service: config.Service{Name: "test"},
		Server: config.Server{
			Address:           "127.0.0.1:0",
			ReadHeaderTimeout: config.Duration(time.Second),
			ShutdownTimeout:   config.Duration(2 * time.Second),
			RequestTimeout:    config.Duration(time.Second),
			BodyLimitBytes:    16,
		},
		Tenancy: config.Tenancy{
			Enabled:    true,
			Source:     "header",
			Header:     config.HeaderSource{Name: "X-Tenant-ID"},
			MaxIDBytes: 64,
		},
	}
}

func newTestServer(t *testing.T, cfg config.Config) *Server {
	t.Helper()
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serve(s *Server, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	s.Echo().ServeHTTP(rec, req)
	return rec
}

func TestTenantAndPublicRoutes(t *testing.T) {
	s := newTestServer(t, testConfig())
	s.Tenant("GET", "/me", func(c echo.Context, _ shards.Accessor) error {
		id, _ := tenant.From(c.Request().Context())
		return c.String(200, id)
	})
	s.Public("GET", "/open", func(c echo.Context) error {
		_, ok := tenant.From(c.Request().Context())
		if ok {
			return c.String(500, "public route saw a tenant")
		}
		return c.String(200, "open")
	})
	if rec := serve(s, "GET", "/me", "", "X-Tenant-ID", "acme"); rec.Code != 200 || rec.Body.String() != "acme" {
		t.Fatalf("tenant route: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(s, "GET", "/me", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("tenant route without tenant: %d", rec.Code)
	}
	if rec := serve(s, "GET", "/open", "", "X-Tenant-ID", "acme"); rec.Code != 200 {
		t.Fatalf("public route: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(s, "GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("healthz: %d", rec.Code)
	}
}

func TestReadiness(t *testing.T) {
	s := newTestServer(t, testConfig())
	if rec := serve(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("no checks: %d", rec.Code)
	}
	var fail = errors.New("db down")
	s.AddReadiness("db", func(context.Context) error { return fail })
	rec := serve(s, "GET", "/readyz", "")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "db down") {
		t.Fatalf("failing check: %d %s", rec.Code, rec.Body)
	}
	fail = nil // the check reads fail on every probe
	if rec := serve(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("passing check: %d", rec.Code)
	}
}

func TestPanicBecomesJSON500(t *testing.T) {
	s := newTestServer(t, testConfig())
	s.Public("GET", "/boom", func(echo.Context) error { panic("boom") })
	rec := serve(s, "GET", "/boom", "")
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":"internal_server_error"`) || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("panic: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "boom") {
		t.Fatal("panic value leaked to the client")
	}
}

func TestBodyLimit(t *testing.T) {
	s := newTestServer(t, testConfig())
	s.Public("POST", "/echo", func(c echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.String(200, string(b))
	})
	if rec := serve(s, "POST", "/echo", "small"); rec.Code != 200 {
		t.Fatalf("small body: %d", rec.Code)
	}
	if rec := serve(s, "POST", "/echo", strings.Repeat("x", 17)); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("17 bytes over a 16-byte limit: %d", rec.Code)
	}
}

func TestRequestTimeoutCancelsHandlerContext(t *testing.T) {
	cfg := testConfig()
	cfg.Server.RequestTimeout = config.Duration(20 * time.Millisecond)
	s := newTestServer(t, cfg)
	s.Public("GET", "/slow", func(c echo.Context) error {
		<-c.Request().Context().Done()
		return c.Request().Context().Err()
	})
	if rec := serve(s, "GET", "/slow", ""); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("timed-out handler: %d %s", rec.Code, rec.Body)
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	s := newTestServer(t, testConfig())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestNewRejectsBadTenancyKeys(t *testing.T) {
	cfg := testConfig()
	cfg.Tenancy.Source = "session"
	cfg.Tenancy.Session = config.SessionSource{Cookie: "s", KeyEnv: "MY_SESSION_KEY"}
	_, err := New(cfg, Options{Getenv: func(string) string { return "" }, Registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "MY_SESSION_KEY") {
		t.Fatalf("err = %v, want one naming MY_SESSION_KEY", err)
	}
}

// TestBadBody: a validation failure is the handler's 400; a bind error is
// answered as the binder refused it, and a body over the limit keeps its
// 413 even wrapped the way a bind wraps it.
func TestBadBody(t *testing.T) {
	if a := errorStatus(BadBody(nil, "need an email")); a.status != 400 || a.msg != "need an email" || a.code != "invalid_body" {
		t.Fatalf("validation failure: %+v", a)
	}
	bound := &ClientError{Status: 400, Code: "invalid_json", Message: "bind", Err: &http.MaxBytesError{Limit: 16}}
	if a := errorStatus(BadBody(bound, "need an email")); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d, want 413", a.status)
	}
	if a := errorStatus(BadBody(NewClientError(415, "unsupported_media_type", "json"), "need an email")); a.status != 415 {
		t.Fatalf("bind refusal: %d, want 415", a.status)
	}
}
