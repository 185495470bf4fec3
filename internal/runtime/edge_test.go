package runtime

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
)

// startServing serves s on a loopback port until the test ends.
func startServing(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawExchange writes raw on a new connection and reads what comes back
// until the server closes it or within passes; it reports whether the
// server closed.
func rawExchange(t *testing.T, addr, raw string, within time.Duration) (answers []*http.Response, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return answers, !(errors.As(err, &ne) && ne.Timeout())
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers = append(answers, resp)
	}
}

func framingServer(t *testing.T) string {
	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 1 << 10
	s := newTestServer(t, cfg)
	s.Public("POST", "/echo", func(c echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.String(200, string(b))
	})
	s.Public("GET", "/ok", func(c echo.Context) error { return c.String(200, "ok") })
	return startServing(t, s)
}

// TestFramingRefusedAndClosed: what net/http would accept and then forget
// is answered 400 and the connection closed, so no trailing bytes are ever
// served as a request of their own.
func TestFramingRefusedAndClosed(t *testing.T) {
	addr := framingServer(t)
	smuggled := "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"
	cases := []struct{ name, raw string }{
		{"CL+TE", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE+CL", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled},
		{"HTTP/1.0 keep-alive with TE", "POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled},
		{"folded TE", "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"folded CL", "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n 3\r\n\r\nabc" + smuggled},
		{"folded other header", "GET /ok HTTP/1.1\r\nHost: a\r\nX-Note: a\r\n\tb\r\n\r\n" + smuggled},
		{"Connection names the tenant header", "GET /ok HTTP/1.1\r\nHost: a\r\nConnection: close, x-tenant-id\r\nX-Tenant-ID: a\r\n\r\n"},
		{"Connection names Authorization", "GET /ok HTTP/1.1\r\nHost: a\r\nConnection: Authorization\r\n\r\n"},
		{"Connection names Cookie", "GET /ok HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: COOKIE\r\n\r\n"},
	}
	for _, tc := range cases {
		answers, closed := rawExchange(t, addr, tc.raw, 2*time.Second)
		if len(answers) != 1 || answers[0].StatusCode != http.StatusBadRequest || !closed {
			var codes []int
			for _, a := range answers {
				codes = append(codes, a.StatusCode)
			}
			t.Errorf("%s: answers %v, closed %v; want one 400 and a closed connection", tc.name, codes, closed)
		}
	}
	// The same connection still serves well-framed keep-alive requests.
	answers, closed := rawExchange(t, addr, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"+
		"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 500*time.Millisecond)
	if len(answers) == 0 || answers[0].StatusCode != 200 {
		t.Fatalf("well-framed requests: %d answers", len(answers))
	}
	if len(answers) == 1 && !closed {
		t.Fatal("the pipelined second request was neither served nor the connection closed")
	}
}

// TestHeaderDeadlineNeverRestarts: on a keep-alive connection, the second
// request's head must be complete read_header_timeout after its first byte,
// however the bytes are spaced (net/http alone starts the clock only at
// the fourth byte, after idle_timeout's wait).
func TestHeaderDeadlineNeverRestarts(t *testing.T) {
	cfg := testConfig()
	cfg.Server.ReadHeaderTimeout = config.Duration(400 * time.Millisecond)
	cfg.Server.IdleTimeout = config.Duration(10 * time.Second)
	s := newTestServer(t, cfg)
	s.Public("GET", "/ok", func(c echo.Context) error { return c.String(200, "ok") })
	addr := startServing(t, s)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The second head, one byte every 200 ms: 3 bytes before net/http
	// would start its clock (at 600 ms), then more, far past 400 ms.
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadAll(br) // a 408 or nothing, then the close
		cut <- time.Since(start)
	}()
	head := "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"
	for i := range len(head) {
		if _, err := c.Write([]byte{head[i]}); err != nil {
			break
		}
		select {
		case d := <-cut:
			if d > 800*time.Millisecond {
				t.Fatalf("the trickled head was read for %s; want it cut 400 ms after its first byte", d)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatal("the whole trickled head was read")
}

// TestSlowBodyAnswered408: a body below the minimum rate is cut after the
// grace with 408 and the connection closed; a handler that waits before
// reading a body the client sent at once is not penalized.
func TestSlowBodyAnswered408(t *testing.T) {
	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 1 << 20
	cfg.Server.RequestTimeout = config.Duration(5 * time.Second)
	cfg.Server.BodyReadTimeout = config.Duration(3 * time.Second)
	cfg.Server.BodyMinBytesPerSecond = 1000
	cfg.Server.BodyRateGrace = config.Duration(300 * time.Millisecond)
	s := newTestServer(t, cfg)
	s.Public("POST", "/late", func(c echo.Context) error {
		time.Sleep(600 * time.Millisecond) // longer than the grace
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.String(200, string(b))
	})
	addr := startServing(t, s)

	start := time.Now()
	answers, closed := rawExchange(t, addr, "POST /late HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\nabc", 3*time.Second)
	took := time.Since(start)
	if len(answers) != 1 || answers[0].StatusCode != http.StatusRequestTimeout || !closed {
		t.Fatalf("stalled body: %d answers, closed %v", len(answers), closed)
	}
	if took > 2*time.Second {
		t.Fatalf("stalled body answered after %s; want about grace + handler wait", took)
	}
	answers, _ = rawExchange(t, addr, "POST /late HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc", 3*time.Second)
	if len(answers) != 1 || answers[0].StatusCode != 200 {
		t.Fatalf("body sent at once, read late: %v", answers)
	}
}

// TestBodyHardDeadline: a body that keeps above the minimum rate but goes
// on past body_read_timeout is cut at it.
func TestBodyHardDeadline(t *testing.T) {
	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 1 << 20
	cfg.Server.RequestTimeout = config.Duration(5 * time.Second)
	cfg.Server.BodyReadTimeout = config.Duration(500 * time.Millisecond)
	s := newTestServer(t, cfg)
	s.Public("POST", "/echo", func(c echo.Context) error {
		_, err := io.Copy(io.Discard, c.Request().Body)
		if err != nil {
			return err
		}
		return c.NoContent(204)
	})
	addr := startServing(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
	go func() {
		for range 40 {
			if _, err := io.WriteString(c, strings.Repeat("x", 100)); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("%d after %s; want 408 near 500 ms", resp.StatusCode, time.Since(start))
	}
}

// TestMethodsAndVersionsRefused: what a cell does not serve is refused
// before routing can turn it into a 404 or a handler call.
func TestMethodsAndVersionsRefused(t *testing.T) {
	s := newTestServer(t, testConfig())
	s.Public("GET", "/ok", func(c echo.Context) error { return c.String(200, "ok") })
	cases := []struct {
		method string
		major  int
		status int
	}{
		{"GET", 1, 200},
		{"get", 1, http.StatusNotImplemented},
		{"PROPFIND", 1, http.StatusNotImplemented},
		{"CONNECT", 1, http.StatusMethodNotAllowed},
		{"TRACE", 1, http.StatusMethodNotAllowed},
		{"PRI", 2, http.StatusHTTPVersionNotSupported},
	}
	for _, tc := range cases {
		req := httptest.NewRequest(tc.method, "/ok", nil)
		req.ProtoMajor = tc.major
		rec := httptest.NewRecorder()
		s.Echo().ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s HTTP/%d: %d, want %d", tc.method, tc.major, rec.Code, tc.status)
		}
		if tc.status != 200 && rec.Header().Get("Connection") != "close" {
			t.Errorf("%s: refused without closing", tc.method)
		}
	}
}

// TestSlowBodyReturnsItsPermit: a tenant at its cap of one request whose
// body stalls gets 408, and its permit is back for its next request.
func TestSlowBodyReturnsItsPermit(t *testing.T) {
	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 1 << 10
	cfg.Server.RequestTimeout = config.Duration(5 * time.Second)
	cfg.Server.BodyReadTimeout = config.Duration(2 * time.Second)
	cfg.Server.BodyMinBytesPerSecond = 100
	cfg.Server.BodyRateGrace = config.Duration(200 * time.Millisecond)
	cfg.Tenancy.MaxConcurrentRequests = 1
	s := newTestServer(t, cfg)
	defer s.bulk.close()
	s.Tenant("POST", "/t", func(c echo.Context, _ shards.Accessor) error {
		var v map[string]any
		if err := c.Bind(&v); err != nil {
			return err
		}
		return c.NoContent(204)
	})
	addr := startServing(t, s)
	stalled := "POST /t HTTP/1.1\r\nHost: a\r\nX-Tenant-ID: acme\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"
	for i := range 3 {
		answers, closed := rawExchange(t, addr, stalled, 3*time.Second)
		if len(answers) != 1 || answers[0].StatusCode != http.StatusRequestTimeout || !closed {
			t.Fatalf("stalled body %d: %d answers, closed %v", i, len(answers), closed)
		}
	}
	answers, _ := rawExchange(t, addr, "POST /t HTTP/1.1\r\nHost: a\r\nX-Tenant-ID: acme\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", 3*time.Second)
	if len(answers) != 1 || answers[0].StatusCode != http.StatusNoContent {
		t.Fatalf("the tenant's next request after three 408s: %v", answers)
	}
	if n := s.Bulkheads().InFlight(); n != 0 {
		t.Fatalf("%d permits held after every request ended", n)
	}
}
