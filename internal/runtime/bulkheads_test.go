package runtime

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/promtest"
	"github.com/cellgate/cellgate/internal/shards"
)

// capsConfig is testConfig with a tenant cap of 1, a server cap of 2 and
// two database permits per tenant.
func capsConfig() config.Config {
	cfg := testConfig()
	cfg.Server.MaxConcurrentRequests = 2
	cfg.Tenancy.MaxConcurrentRequests = 1
	cfg.Tenancy.MaxDBConnections = 2
	return cfg
}

func newServerWithEnv(t *testing.T, cfg config.Config, env map[string]string) *Server {
	t.Helper()
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.bulk.close)
	return s
}

// waitZero polls until every permit is back (a client-side read can end
// a moment before the server's handler returns).
func waitZero(t *testing.T, b Bulkheads) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("permits still held: server %d, total %d", b.Server.InFlight(), b.InFlight())
		}
		time.Sleep(time.Millisecond)
	}
}

func tenantGet(t *testing.T, url, tenant string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Tenant-ID", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestLongStreamHoldsNoRequestPermit serves an SSE stream on a real
// listener with a tenant cap of 1: once the head is out, the stream holds
// neither the tenant nor the server permit (a second request of the same
// tenant is served while it runs), but a database checkout in the
// streaming body is counted.
func TestLongStreamHoldsNoRequestPermit(t *testing.T) {
	s := newServerWithEnv(t, capsConfig(), nil)
	b := s.Bulkheads()
	stop := make(chan struct{})
	dbHeld := make(chan int64, 1)
	s.Tenant("GET", "/events", func(c echo.Context, sh shards.Accessor) error {
		res := c.Response()
		res.Header().Set("Content-Type", "text/event-stream")
		res.WriteHeader(http.StatusOK)
		res.Flush()
		// A checkout in the streaming body takes a database permit.
		p, err := sh.Permits().Acquire()
		if err != nil {
			return err
		}
		dbHeld <- b.DB.InFlight()
		p.Release()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return nil
			case <-c.Request().Context().Done():
				return nil
			case <-time.After(2 * time.Millisecond):
			}
			if _, err := fmt.Fprintf(res, "data: %d\n\n", i); err != nil {
				return nil
			}
			res.Flush()
		}
	})
	s.Tenant("GET", "/ping", func(c echo.Context, _ shards.Accessor) error { return c.String(200, "pong") })
	srv := httptest.NewServer(s.Echo())
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/events", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: 0") {
		t.Fatalf("first event: %q %v", line, err)
	}
	if n := <-dbHeld; n != 1 {
		t.Fatalf("db permits during the streaming checkout: %d, want 1", n)
	}
	if n := b.Requests.InFlightOf("acme"); n != 0 {
		t.Fatalf("the stream holds %d tenant permits", n)
	}
	if n := b.Server.InFlight(); n != 0 {
		t.Fatalf("the stream holds %d server permits", n)
	}
	for i := 0; i < 3; i++ { // cap 1, yet the tenant is served while streaming
		if r, body := tenantGet(t, srv.URL+"/ping", "acme"); r.StatusCode != 200 {
			t.Fatalf("request during the stream: %d %s", r.StatusCode, body)
		}
	}
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data:") && line != "\n" {
		t.Fatalf("stream stalled: %q %v", line, err)
	}
	close(stop)
	waitZero(t, b)
}

// TestHijackReleasesPermits upgrades a connection (as a WebSocket library
// does) through the wrapped writer: the hijack works and the permits go
// back while the connection stays open.
func TestHijackReleasesPermits(t *testing.T) {
	s := newServerWithEnv(t, capsConfig(), nil)
	b := s.Bulkheads()
	done := make(chan struct{})
	s.Tenant("GET", "/ws", func(c echo.Context, _ shards.Accessor) error {
		conn, brw, err := http.NewResponseController(c.Response()).Hijack()
		if err != nil {
			return err
		}
		defer conn.Close()
		switched := &http.Response{StatusCode: http.StatusSwitchingProtocols, ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Upgrade": {"echo"}, "Connection": {"Upgrade"}}}
		_ = switched.Write(brw)
		brw.Flush()
		line, _ := brw.ReadString('\n') // echo one line, then hold the connection
		brw.WriteString(line)
		brw.Flush()
		<-done
		return nil
	})
	s.Tenant("GET", "/ping", func(c echo.Context, _ shards.Accessor) error { return c.String(200, "pong") })
	srv := httptest.NewServer(s.Echo())
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: acme\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	rd := bufio.NewReader(conn)
	if status, _ := rd.ReadString('\n'); !strings.Contains(status, "101") {
		t.Fatalf("upgrade answer: %q", status)
	}
	for line, _ := rd.ReadString('\n'); line != "\r\n"; line, _ = rd.ReadString('\n') {
	}
	fmt.Fprintf(conn, "hello\n")
	if got, _ := rd.ReadString('\n'); got != "hello\n" {
		t.Fatalf("echo over the hijacked connection: %q", got)
	}
	if b.InFlight() != 0 {
		t.Fatalf("an upgraded connection holds permits: server %d total %d", b.Server.InFlight(), b.InFlight())
	}
	if r, body := tenantGet(t, srv.URL+"/ping", "acme"); r.StatusCode != 200 {
		t.Fatalf("request during the upgraded connection: %d %s", r.StatusCode, body)
	}
	close(done)
	waitZero(t, b)
}

// TestServerChainAnswersAndCounts runs the whole tenant chain of a Server
// without a listener: tenant cap, server cap, the order between them, the
// db refusal through the JSON error handler, and the metrics.
func TestServerChainAnswersAndCounts(t *testing.T) {
	s := newServerWithEnv(t, capsConfig(), nil)
	b := s.Bulkheads()
	got := map[string]*httptest.ResponseRecorder{}
	s.Tenant("GET", "/hold/:step", func(c echo.Context, _ shards.Accessor) error {
		switch c.Param("step") {
		case "1":
			got["acme again"] = serve(s, "GET", "/hold/0", "", "X-Tenant-ID", "acme")
			got["globex"] = serve(s, "GET", "/hold/2", "", "X-Tenant-ID", "globex")
		case "2":
			got["initech"] = serve(s, "GET", "/hold/0", "", "X-Tenant-ID", "initech")
			got["public"] = serve(s, "GET", "/open", "")
			got["healthz"] = serve(s, "GET", "/healthz", "")
		}
		return c.NoContent(204)
	})
	s.Tenant("GET", "/db", func(c echo.Context, sh shards.Accessor) error {
		bind := sh.Permits()
		p1, _ := bind.Acquire()
		p2, _ := bind.Acquire()
		defer p1.Release()
		defer p2.Release()
		_, err := bind.Acquire()
		return fmt.Errorf("checkout: %w", err)
	})
	s.Public("GET", "/open", func(c echo.Context) error { return c.String(200, "open") })
	if rec := serve(s, "GET", "/hold/1", "", "X-Tenant-ID", "acme"); rec.Code != 204 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	want := map[string]int{"acme again": 503, "globex": 204, "initech": 503, "public": 200, "healthz": 200}
	for k, code := range want {
		if got[k].Code != code {
			t.Errorf("%s: %d %s, want %d", k, got[k].Code, got[k].Body, code)
		}
	}
	for k, code := range map[string]string{"acme again": "tenant_overloaded", "initech": "server_overloaded"} {
		var body problemBody
		if err := json.Unmarshal(got[k].Body.Bytes(), &body); err != nil || body.Code != code || got[k].Header().Get("Retry-After") != "1" {
			t.Errorf("%s: body %s Retry-After %q, want code %s and 1", k, got[k].Body, got[k].Header().Get("Retry-After"), code)
		}
	}
	rec := serve(s, "GET", "/db", "", "X-Tenant-ID", "acme")
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "tenant_db_overloaded") {
		t.Fatalf("db refusal: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	waitZero(t, b)

	reg := s.Registry()
	for name, want := range map[string]float64{
		`cellgate_tenant_bulkhead_rejections_total{kind="request"}`:                     1,
		`cellgate_tenant_bulkhead_rejections_total{kind="db"}`:                          1,
		`cellgate_server_admission_rejections_total`:                                    1,
		`cellgate_server_in_flight_requests`:                                            0,
		`cellgate_admission_in_flight_permits{engine="request"}`:                        0,
		`cellgate_admission_in_flight_permits{engine="db"}`:                             0,
		`cellgate_http_requests_total{code="2xx",method="GET",route="/hold/:step"}`:     2,
		`cellgate_http_requests_total{code="5xx",method="GET",route="/hold/:step"}`:     2,
		`cellgate_http_requests_total{code="5xx",method="GET",route="/db"}`:             1,
		`cellgate_http_requests_total{code="2xx",method="GET",route="/open"}`:           1,
		`cellgate_admission_outcomes_total{engine="request",outcome="admitted"}`:        4, // acme, globex, initech (then refused by the server), /db
		`cellgate_admission_outcomes_total{engine="db",outcome="rejected_concurrency"}`: 1,
	} {
		if v := promtest.Value(t, reg, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if strings.Contains(mf.GetName(), "healthz") {
			t.Errorf("probe instrumented: %s", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "tenant" || strings.Contains(lp.GetValue(), "acme") {
					t.Errorf("%s carries a tenant: %s=%s", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// TestRateLimitOnServer: tenancy.rate_per_second gives 429 with
// Retry-After, per tenant.
func TestRateLimitOnServer(t *testing.T) {
	cfg := testConfig()
	cfg.Tenancy.RatePerSecond = 0.5
	cfg.Tenancy.Burst = 1
	s := newServerWithEnv(t, cfg, nil)
	s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return c.NoContent(204) })
	if rec := serve(s, "GET", "/x", "", "X-Tenant-ID", "acme"); rec.Code != 204 {
		t.Fatalf("first: %d", rec.Code)
	}
	rec := serve(s, "GET", "/x", "", "X-Tenant-ID", "acme")
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("over rate: %d Retry-After=%q", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := serve(s, "GET", "/x", "", "X-Tenant-ID", "globex"); rec.Code != 204 {
		t.Fatalf("another tenant: %d", rec.Code)
	}
}

func TestCapsValidationNamesFields(t *testing.T) {
	for field, mod := range map[string]func(*config.Config){
		"tenancy.burst":                   func(c *config.Config) { c.Tenancy.RatePerSecond = 5 },
		"tenancy.max_db_connections":      func(c *config.Config) { c.Tenancy.MaxDBConnections = -1 },
		"server.max_concurrent_requests":  func(c *config.Config) { c.Server.MaxConcurrentRequests = -1 },
		"tenancy.max_concurrent_requests": func(c *config.Config) { c.Tenancy.MaxConcurrentRequests = -2 },
		"admission.funding":               func(c *config.Config) { c.Admission.Funding = -1 },
	} {
		cfg := testConfig()
		mod(&cfg)
		_, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }})
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}

func TestAdminAdmissionEndpoint(t *testing.T) {
	cfg := capsConfig()
	cfg.Server.AdminTokenEnv = "TEST_ADMIN_TOKEN"
	if rec := serve(newServerWithEnv(t, cfg, nil), "GET", AdmissionPath, ""); rec.Code != 404 {
		t.Fatalf("without a token the endpoint must not exist: %d", rec.Code)
	}
	s := newServerWithEnv(t, cfg, map[string]string{"TEST_ADMIN_TOKEN": "s3cret-token"})
	s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return c.NoContent(204) })
	serve(s, "GET", "/x", "", "X-Tenant-ID", "acme")
	for _, auth := range []string{"", "Bearer wrong", "s3cret-token", "Bearer s3cret-tokenX", "Basic s3cret-token"} {
		rec := serve(s, "GET", AdmissionPath, "", "Authorization", auth)
		if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d", auth, rec.Code)
		}
	}
	rec := serve(s, "GET", AdmissionPath, "", "Authorization", "Bearer s3cret-token")
	if rec.Code != 200 {
		t.Fatalf("with the token: %d %s", rec.Code, rec.Body)
	}
	var r AdmissionReport
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Server.MaxConcurrentRequests != 2 || r.Requests == nil || r.DB == nil ||
		r.Requests.MaxConcurrent != 1 || r.DB.MaxConcurrent != 2 || r.Requests.Outcomes["admitted"] != 1 ||
		r.Requests.Layout != "SINGLE" || r.Requests.Accounts != 1 {
		t.Fatalf("report: %s", rec.Body)
	}
	for _, key := range []string{`"contention"`, `"contended_exchanges"`, `"hottest"`, `"sharding"`, `"affinities_assigned"`, `"crowded"`} {
		if !strings.Contains(rec.Body.String(), key) {
			t.Errorf("report lacks %s: %s", key, rec.Body)
		}
	}
}

// TestNoCapsNoEngines: with every per-tenant limit off the chain has no
// tenant bulkhead, and the server limiter only counts.
func TestNoCapsNoEngines(t *testing.T) {
	s := newServerWithEnv(t, testConfig(), nil)
	b := s.Bulkheads()
	if b.Requests != nil || b.DB != nil || b.Server == nil || b.Server.Max() != 0 {
		t.Fatalf("bulkheads with caps off: %+v", b)
	}
	var seen int64
	s.Tenant("GET", "/x", func(c echo.Context, sh shards.Accessor) error {
		seen = b.Server.InFlight()
		if sh.Permits() != nil {
			t.Error("db permits bound with max_db_connections 0")
		}
		return c.NoContent(204)
	})
	serve(s, "GET", "/x", "", "X-Tenant-ID", "acme")
	if seen != 1 || b.InFlight() != 0 {
		t.Fatalf("server in flight seen %d, after %d", seen, b.InFlight())
	}
}
