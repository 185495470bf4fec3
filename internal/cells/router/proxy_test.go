package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/httpguard"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/tenancy"
)

// Tenants of the two-cell map 0-8191 / 8192-16383 (slots from
// TestSlotVectors): umbrella (5538) and bar (5061) on cell-1, acme (11304)
// and globex (14041) on cell-2.
const (
	tenant1  = "umbrella"
	tenant1b = "bar"
	tenant2  = "acme"
	tenant2b = "globex"
)

// seen is what an upstream cell saw of a request.
type seen struct {
	Cell      string `json:"cell"`
	URI       string `json:"uri"`
	Host      string `json:"host"`
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	XFF       string `json:"xff"`
}

// testCell is an upstream cell: it echoes what it saw, answers /readyz
// according to ready, and hands other paths to extra when set.
type testCell struct {
	name  string
	srv   *httptest.Server
	ready atomic.Bool
	hits  atomic.Int64
	extra http.HandlerFunc
}

func newTestCell(tb testing.TB, name string) *testCell {
	tb.Helper()
	c := &testCell{name: name}
	c.ready.Store(true)
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	tb.Cleanup(c.srv.Close)
	return c
}

func (c *testCell) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		if !c.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	c.hits.Add(1)
	if c.extra != nil && strings.HasPrefix(r.URL.Path, "/x/") {
		c.extra(w, r)
		return
	}
	w.Header().Set("X-Request-ID", r.Header.Get("X-Request-ID")) // as Echo's RequestID does
	_ = json.NewEncoder(w).Encode(seen{
		Cell: c.name, URI: r.RequestURI, Host: r.Host, RequestID: r.Header.Get("X-Request-ID"),
		Tenant: r.Header.Get("X-Tenant-ID"), XFF: r.Header.Get("X-Forwarded-For"),
	})
}

func headerTenancy() config.Tenancy {
	return config.Tenancy{Enabled: true, Source: "header", Header: config.HeaderSource{Name: "X-Tenant-ID"}, MaxIDBytes: 64}
}

type fixture struct {
	p      *Proxy
	reg    *prometheus.Registry
	router *httptest.Server
	cells  []*testCell
}

func newFixture(tb testing.TB, cfg ProxyConfig) *fixture {
	tb.Helper()
	c1, c2 := newTestCell(tb, "cell-1"), newTestCell(tb, "cell-2")
	r, err := cells.New([]cells.CellSpec{
		{Name: "cell-1", URL: c1.srv.URL, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: c2.srv.URL, Slots: []string{"8192-16383"}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	x, err := Extractor(headerTenancy(), os.Getenv, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = time.Hour // tests drive checks with CheckNow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), nil))
	}
	p, err := NewProxy(cfg, x, r, reg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	f := &fixture{p: p, reg: reg, cells: []*testCell{c1, c2}}
	// net/http's server on the guarded listener, as Run sets it up.
	f.router = httptest.NewUnstartedServer(p)
	f.router.Listener = httpguard.Listener{Listener: f.router.Listener}
	httpguard.Install(f.router.Config)
	f.router.Start()
	tb.Cleanup(f.router.Close)
	return f
}

// get sends a request through the router and returns the response with
// its body read.
func (f *fixture) get(tb testing.TB, path, tenant string, hdr ...string) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest("GET", f.router.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(tb, req)
}

// do sends req with the default client and returns the response with its
// body read.
func do(tb testing.TB, req *http.Request) (*http.Response, []byte) {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, body
}

func (f *fixture) seen(tb testing.TB, path, tenant string, hdr ...string) seen {
	tb.Helper()
	resp, body := f.get(tb, path, tenant, hdr...)
	if resp.StatusCode != 200 {
		tb.Fatalf("GET %s as %q: %d %s", path, tenant, resp.StatusCode, body)
	}
	var s seen
	if err := json.Unmarshal(body, &s); err != nil {
		tb.Fatalf("body %s: %v", body, err)
	}
	if got := resp.Header.Get("X-Cellgate-Cell"); got != s.Cell {
		tb.Fatalf("X-Cellgate-Cell %q but served by %q", got, s.Cell)
	}
	return s
}

func TestProxyRoutesTenantsToTheirCells(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	for tenant, want := range map[string]string{tenant1: "cell-1", tenant1b: "cell-1", tenant2: "cell-2", tenant2b: "cell-2"} {
		s := f.seen(t, "/orders?page=2", tenant)
		if s.Cell != want || s.Tenant != tenant {
			t.Errorf("%s: served by %s as %q; want %s", tenant, s.Cell, s.Tenant, want)
		}
	}
	// Path and query pass exactly as sent, escapes included.
	if s := f.seen(t, "/a%2Fb/c?q=x%20y&z=%2F", tenant2); s.URI != "/a%2Fb/c?q=x%20y&z=%2F" {
		t.Errorf("upstream saw %q", s.URI)
	}
	// A request id is generated when absent, forwarded when present.
	resp, body := f.get(t, "/x", tenant1)
	var s seen
	_ = json.Unmarshal(body, &s)
	if s.RequestID == "" || resp.Header.Get("X-Request-ID") != s.RequestID {
		t.Errorf("generated request id: upstream %q, response %q", s.RequestID, resp.Header.Get("X-Request-ID"))
	}
	if s := f.seen(t, "/x", tenant1, "X-Request-ID", "abc-123"); s.RequestID != "abc-123" {
		t.Errorf("forwarded request id %q", s.RequestID)
	}
	// The Host header is kept (subdomain tenancy needs it) and
	// X-Forwarded-For keeps an incoming chain.
	if s := f.seen(t, "/x", tenant1, "Host", "acme.example.test", "X-Forwarded-For", "203.0.113.9"); s.Host != "acme.example.test" || s.XFF != "203.0.113.9, 127.0.0.1" {
		t.Errorf("host %q, xff %q", s.Host, s.XFF)
	}
}

// TestProxyWithoutTenantGoesToAnyCell: requests with no usable tenant go
// round-robin to the cells, which answer them exactly as they would
// directly (public routes served, tenant routes refused by the cell).
func TestProxyWithoutTenantGoesToAnyCell(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	got := map[string]int{}
	for range 10 {
		got[f.seen(t, "/", "").Cell]++
	}
	if got["cell-1"] != 5 || got["cell-2"] != 5 {
		t.Errorf("tenant-less requests spread %v; want 5 and 5", got)
	}
	// A malformed tenant is the cells' business too.
	if s := f.seen(t, "/", "bad tenant!"); s.Tenant != "bad tenant!" {
		t.Errorf("cell saw tenant %q", s.Tenant)
	}
	// With every cell down, such a request gets 503 from the router.
	f.cells[0].srv.Close()
	f.cells[1].srv.Close()
	f.p.CheckNow(context.Background())
	resp, body := f.get(t, "/", "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "no_cell") {
		t.Errorf("all cells down: %d %s", resp.StatusCode, body)
	}
}

// restart brings a closed test cell back on the same address.
func (c *testCell) restart(tb testing.TB) {
	tb.Helper()
	addr := c.srv.Listener.Addr().String()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("relisten on %s: %v", addr, err)
	}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	c.srv.Listener.Close()
	c.srv.Listener = ln
	c.srv.Start()
	tb.Cleanup(c.srv.Close)
}

func TestProxyDownCellAffectsOnlyItsTenants(t *testing.T) {
	f := newFixture(t, ProxyConfig{HealthInterval: 3 * time.Second})
	f.cells[1].srv.Close() // cell-2 dies

	// The first request notices the refused connection and answers 503
	// at once; later ones do not even try.
	for range 3 {
		resp, body := f.get(t, "/orders", tenant2)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || resp.Header.Get("X-Cellgate-Cell") != "cell-2" {
			t.Fatalf("tenant of the dead cell: %d retry-after %q cell %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Cellgate-Cell"), body)
		}
		if resp.Header.Get("X-Request-ID") == "" {
			t.Error("503 without a request id")
		}
	}
	for range 20 {
		if s := f.seen(t, "/orders", tenant1); s.Cell != "cell-1" {
			t.Fatalf("tenant of cell-1 served by %s", s.Cell)
		}
	}
	if f.p.CellUp("cell-2") || !f.p.CellUp("cell-1") {
		t.Fatal("cell states wrong")
	}
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_cell_up", "cell-2")); v != 0 {
		t.Errorf("cell_up{cell-2} = %v", v)
	}

	// Back on the same address: the next health check brings it back.
	f.cells[1].restart(t)
	f.p.CheckNow(context.Background())
	if s := f.seen(t, "/orders", tenant2); s.Cell != "cell-2" {
		t.Fatalf("after recovery served by %s", s.Cell)
	}
	requireCounter(t, f.reg, "cellgate_router_cell_ejections_total", map[string]string{"cell": "cell-2", "cause": "passive"}, 1)
	requireCounter(t, f.reg, "cellgate_router_upstream_errors_total", map[string]string{"cell": "cell-2", "kind": "dial"}, 1)
	requireCounter(t, f.reg, "cellgate_router_rejections_total", map[string]string{"cell": "cell-2", "reason": "down"}, 2)
	requireCounter(t, f.reg, "cellgate_router_requests_total", map[string]string{"cell": "cell-1", "code_class": "2xx"}, 20)
}

func TestProxyActiveHealthCheck(t *testing.T) {
	f := newFixture(t, ProxyConfig{FailAfter: 2})
	f.cells[1].ready.Store(false)
	f.p.CheckNow(context.Background())
	if !f.p.CellUp("cell-2") {
		t.Fatal("down after one failed check; FailAfter is 2")
	}
	f.p.CheckNow(context.Background())
	if f.p.CellUp("cell-2") {
		t.Fatal("up after two failed checks")
	}
	hits := f.cells[1].hits.Load()
	if resp, _ := f.get(t, "/x", tenant2); resp.StatusCode != 503 {
		t.Fatalf("tenant of a not-ready cell: %d", resp.StatusCode)
	}
	if f.cells[1].hits.Load() != hits {
		t.Fatal("a request reached the down cell")
	}
	if s := f.seen(t, "/x", tenant1); s.Cell != "cell-1" {
		t.Fatal("cell-1 tenant not served")
	}
	f.cells[1].ready.Store(true)
	f.p.CheckNow(context.Background())
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
		t.Fatal("not back after a passing check")
	}
	requireCounter(t, f.reg, "cellgate_router_cell_ejections_total", map[string]string{"cell": "cell-2", "cause": "active"}, 1)
}

// TestProxyHealthLoop: Start's loop alone (no CheckNow) marks a dead cell
// down and a revived one up, within a few intervals.
func TestProxyHealthLoop(t *testing.T) {
	f := newFixture(t, ProxyConfig{HealthInterval: 20 * time.Millisecond, FailAfter: 1})
	f.p.Start(context.Background())
	f.cells[1].ready.Store(false)
	waitFor(t, time.Second, func() bool { return !f.p.CellUp("cell-2") })
	f.cells[1].ready.Store(true)
	waitFor(t, time.Second, func() bool { return f.p.CellUp("cell-2") })
}

func waitFor(tb testing.TB, within time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProxyPassiveEjection: transport errors that are not refused
// connections eject after FailAfter in a row; a cell's own 5xx never does.
func TestProxyPassiveEjection(t *testing.T) {
	f := newFixture(t, ProxyConfig{FailAfter: 3})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/x/500" {
			w.WriteHeader(500)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // drop the connection without an answer
		}
	}
	for range 5 {
		if resp, _ := f.get(t, "/x/500", tenant2); resp.StatusCode != 500 {
			t.Fatalf("cell 500 answered %d", resp.StatusCode)
		}
	}
	if !f.p.CellUp("cell-2") {
		t.Fatal("a cell's 500s ejected it")
	}
	for i := range 3 {
		resp, _ := f.get(t, "/x/drop", tenant2)
		if resp.StatusCode != 502 {
			t.Fatalf("dropped connection %d answered %d", i, resp.StatusCode)
		}
	}
	if f.p.CellUp("cell-2") {
		t.Fatal("still up after 3 transport errors")
	}
	if resp, _ := f.get(t, "/x/500", tenant2); resp.StatusCode != 503 {
		t.Fatalf("ejected cell answered %d", resp.StatusCode)
	}
	if s := f.seen(t, "/x", tenant1); s.Cell != "cell-1" {
		t.Fatal("cell-1 affected")
	}
	requireCounter(t, f.reg, "cellgate_router_upstream_errors_total", map[string]string{"cell": "cell-2", "kind": "other"}, 3)
}

func TestProxyTimeout(t *testing.T) {
	f := newFixture(t, ProxyConfig{ResponseHeaderTimeout: 50 * time.Millisecond, FailAfter: 5})
	release := make(chan struct{})
	defer close(release)
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	resp, body := f.get(t, "/x/slow", tenant2)
	if resp.StatusCode != 504 || !strings.Contains(string(body), "cell_timeout") {
		t.Fatalf("slow cell: %d %s", resp.StatusCode, body)
	}
}

func TestProxyConcurrencyCap(t *testing.T) {
	f := newFixture(t, ProxyConfig{MaxInFlightPerCell: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest("GET", f.router.URL+"/x/hold", nil)
		req.Header.Set("X-Tenant-ID", tenant2)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	resp, body := f.get(t, "/x/other", tenant2b)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "cell_busy") {
		t.Fatalf("over the cap: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if s := f.seen(t, "/x", tenant1); s.Cell != "cell-1" {
		t.Fatal("the cap of cell-2 limited cell-1")
	}
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_in_flight_requests", "cell-2")); v != 1 {
		t.Errorf("in flight on cell-2 = %v", v)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	// The client can read the whole response before the proxy's handler has
	// returned and given the slot back, so wait (boundedly) for the release.
	deadline := time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_in_flight_requests", "cell-2")) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_in_flight_requests", "cell-2")); v != 0 {
		t.Errorf("in flight after the request = %v", v)
	}
	requireCounter(t, f.reg, "cellgate_router_rejections_total", map[string]string{"cell": "cell-2", "reason": "concurrency"}, 1)
}

// TestProxyStreamsSSE uses an httptest SSE upstream (the example cell has
// no SSE route): the client must read the first event while the upstream
// is still waiting to send the second, so nothing is buffered.
func TestProxyStreamsSSE(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	next := make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			_ = http.NewResponseController(w).Flush()
			select {
			case <-next:
			case <-time.After(5 * time.Second):
				return // the client never read it: the router buffered
			}
		}
	}
	req, _ := http.NewRequest("GET", f.router.URL+"/x/events", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Cellgate-Cell") != "cell-2" {
		t.Errorf("cell header %q", resp.Header.Get("X-Cellgate-Cell"))
	}
	br := bufio.NewReader(resp.Body)
	for i := 1; i <= 3; i++ {
		got := make(chan string, 1)
		go func() {
			line, _ := br.ReadString('\n')
			_, _ = br.ReadString('\n')
			got <- line
		}()
		select {
		case line := <-got:
			if line != fmt.Sprintf("data: event %d\n", i) {
				t.Fatalf("event %d: %q", i, line)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("event %d did not arrive while the upstream held the stream open", i)
		}
		next <- struct{}{}
	}
}

// TestProxyStreamsRequestBody: the cell reads the first part of the body
// before the client has sent the rest.
func TestProxyStreamsRequestBody(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	gotFirst := make(chan string, 1)
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			gotFirst <- "error: " + err.Error()
			return
		}
		gotFirst <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s|%s", buf, rest)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.router.URL+"/x/upload", pr)
	req.Header.Set("X-Tenant-ID", tenant2)
	result := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			result <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- string(b)
	}()
	if _, err := pw.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-gotFirst:
		if s != "first" {
			t.Fatalf("cell read %q", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the cell did not see the first chunk before the body ended: the router buffers")
	}
	_, _ = pw.Write([]byte("-second"))
	pw.Close()
	if s := <-result; s != "first|-second" {
		t.Fatalf("response %q", s)
	}
}

// TestProxyPassesUpgrades: a WebSocket-style upgrade (101 then raw bytes
// both ways) goes through ReverseProxy's native upgrade handling.
func TestProxyPassesUpgrades(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			w.WriteHeader(400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		switched := &http.Response{StatusCode: http.StatusSwitchingProtocols, ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Upgrade": {"echo"}, "Connection": {"Upgrade"}}}
		_ = switched.Write(brw)
		_ = brw.Flush()
		buf := make([]byte, 4)
		for {
			if _, err := io.ReadFull(brw, buf); err != nil {
				return
			}
			_, _ = conn.Write(buf)
		}
	}
	conn, err := net.Dial("tcp", f.router.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /x/ws HTTP/1.1\r\nHost: router\r\nX-Tenant-ID: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", tenant2)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("X-Cellgate-Cell") != "cell-2" {
		t.Fatalf("upgrade: %d cell %q", resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"))
	}
	for _, msg := range []string{"ping", "pong"} {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q: %q %v", msg, buf, err)
		}
	}
}

func TestProxyFrozenSlots(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	m := f.p.Router().SlotMap()
	m.Frozen = []string{"11000-11999"} // holds acme (11304)
	if err := f.p.ReloadSlotMap(m.Marshal()); err != nil {
		t.Fatal(err)
	}
	resp, body := f.get(t, "/x", tenant2)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "cell_moving") {
		t.Fatalf("frozen tenant: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if s := f.seen(t, "/x", tenant2b); s.Cell != "cell-2" {
		t.Fatal("an unfrozen tenant of the same cell was refused")
	}
	requireCounter(t, f.reg, "cellgate_router_rejections_total", map[string]string{"cell": "cell-2", "reason": "frozen"}, 1)
}

// TestSlotMapReload: the watcher swaps in a changed file, and keeps the
// last good map (counting and flagging it) when the file goes bad.
func TestSlotMapReload(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	w, orig := watchedFile(t, f)
	path := w.path
	log := DefaultProxyConfig.withDefaults().Logger

	// acme moves to cell-1.
	moved := cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: orig.Cells[0].URL, Slots: []string{"0-12000"}},
		{Name: "cell-2", URL: orig.Cells[1].URL, Slots: []string{"12001-16383"}},
	}}
	if err := cells.WriteSlotMap(path, moved); err != nil {
		t.Fatal(err)
	}
	w.poll(f.p, log)
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-1" {
		t.Fatalf("after reload acme on %s", s.Cell)
	}
	// A map with a gap is refused; routing stays as it was.
	if err := os.WriteFile(path, []byte(`{"cells":[{"name":"cell-1","url":"http://x","slots":["0-10"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w.poll(f.p, log)
	w.poll(f.p, log) // unchanged bad content is not counted twice
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-1" {
		t.Fatalf("a bad map changed routing: acme on %s", s.Cell)
	}
	requireCounter(t, f.reg, "cellgate_router_slotmap_reloads_total", map[string]string{"result": "invalid"}, 1)
	requireCounter(t, f.reg, "cellgate_router_slotmap_reloads_total", map[string]string{"result": "ok"}, 1)
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_slotmap_current", "")); v != 0 {
		t.Errorf("slotmap_current = %v with a bad file", v)
	}
	// Fixed again.
	if err := cells.WriteSlotMap(path, orig); err != nil {
		t.Fatal(err)
	}
	w.poll(f.p, log)
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
		t.Fatalf("after the fix acme on %s", s.Cell)
	}
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_slotmap_current", "")); v != 1 {
		t.Errorf("slotmap_current = %v", v)
	}
}

// watchedFile writes f's map to a slot map file and returns a watcher
// that has seen it, and the map.
func watchedFile(tb testing.TB, f *fixture) (*fileWatch, cells.SlotMap) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "slotmap.json")
	orig := f.p.Router().SlotMap()
	if err := cells.WriteSlotMap(path, orig); err != nil {
		tb.Fatal(err)
	}
	return &fileWatch{path: path, last: orig.Marshal()}, orig
}

func TestProxyMetricsLint(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	f.seen(t, "/x", tenant1)
	problems, err := testutil.CollectAndLint(f.p.m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n, engine := 0, 0
	for _, mf := range mfs {
		switch {
		case strings.HasPrefix(mf.GetName(), "cellgate_router_"):
			n += len(mf.GetMetric())
		case strings.HasPrefix(mf.GetName(), "cellgate_admission_"):
			engine += len(mf.GetMetric())
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" || l.GetName() == "engine" && l.GetValue() != "router" {
						t.Errorf("%s has label %s=%s", mf.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
	// Per cell: 5 request classes and 499, up, in flight, 4 rejections,
	// 3 errors, 2 ejections, client errors = 18; plus no_cell,
	// bad_requests, 3 reloads, current, cells = 7.
	if n != 2*18+7 {
		t.Errorf("%d series; want %d (labels must stay bounded by the slot map)", n, 2*18+7)
	}
	if engine == 0 {
		t.Error("the per-tenant engine's metrics (engine=router) are not registered")
	}
	problems, err = testutil.GatherAndLint(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func TestProxySubdomainTenancy(t *testing.T) {
	c1, c2 := newTestCell(t, "cell-1"), newTestCell(t, "cell-2")
	r, err := cells.New([]cells.CellSpec{{Name: "cell-1", URL: c1.srv.URL}, {Name: "cell-2", URL: c2.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	tn := config.Tenancy{Enabled: true, Source: "subdomain", Subdomain: config.SubdomainSource{BaseDomain: "example.test"}, MaxIDBytes: 64}
	x, err := Extractor(tn, os.Getenv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(ProxyConfig{HealthInterval: time.Hour}, x, r, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for tenant, want := range map[string]string{tenant1: "cell-1", tenant2: "cell-2"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://"+tenant+".example.test/x", nil)
		p.ServeHTTP(rec, req)
		var s seen
		_ = json.Unmarshal(rec.Body.Bytes(), &s)
		if s.Cell != want || s.Host != tenant+".example.test" {
			t.Errorf("%s: cell %s host %s; want %s", tenant, s.Cell, s.Host, want)
		}
	}
}

func TestProxyConfigErrors(t *testing.T) {
	r, err := cells.New([]cells.CellSpec{
		{Name: "cell-1", URL: "http://cell-1:3000", Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: "http://cell-2:3000", Slots: []string{"8192-16383"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewProxy(ProxyConfig{}, nil, r, prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), "tenancy is disabled") {
		t.Errorf("two cells without tenancy: %v", err)
	}
	x, _ := tenancy.NewExtractor(tenancy.Config{})
	for _, tc := range []struct {
		cfg  ProxyConfig
		want string
	}{
		{ProxyConfig{FailAfter: -1}, "FailAfter"},
		{ProxyConfig{MaxInFlightPerCell: -2}, "MaxInFlightPerCell"},
		{ProxyConfig{CheckPath: "readyz"}, "CheckPath"},
		{ProxyConfig{CellHeader: "bad header"}, "CellHeader"},
		{ProxyConfig{HealthInterval: -time.Second}, "HealthInterval"},
	} {
		if _, err := NewProxy(tc.cfg, x, r, prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %s", tc.cfg, err, tc.want)
		}
	}
}

// TestRun runs the whole router process function: probes, proxying,
// the file watch, and a clean return when ctx ends.
func TestRun(t *testing.T) {
	c1, c2 := newTestCell(t, "cell-1"), newTestCell(t, "cell-2")
	path := filepath.Join(t.TempDir(), "slotmap.json")
	if err := cells.WriteSlotMap(path, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: c1.srv.URL}, {Name: "cell-2", URL: c2.srv.URL}}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{Tenancy: headerTenancy()}
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Listener: ln, SlotMapFile: path, ReloadInterval: 10 * time.Millisecond, Registry: reg,
			Proxy: ProxyConfig{HealthInterval: 50 * time.Millisecond}})
	}()
	base := "http://" + ln.Addr().String()
	f := &fixture{router: &httptest.Server{URL: base}}
	waitFor(t, 5*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
		t.Fatalf("acme on %s", s.Cell)
	}
	resp, body := f.get(t, "/readyz", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"cell-2":"up"`) {
		t.Fatalf("readyz %d %s", resp.StatusCode, body)
	}
	resp, body = f.get(t, "/metrics", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `cellgate_router_requests_total{cell="cell-2",code_class="2xx"} 1`) {
		t.Fatalf("metrics %d:\n%s", resp.StatusCode, body)
	}
	// Move everything to cell-1 by rewriting the file.
	if err := cells.WriteSlotMap(path, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: c1.srv.URL, Slots: []string{"0-16383"}}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool { return f.seen(t, "/x", tenant2).Cell == "cell-1" })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// gaugeOf finds one series of a metric family in reg (label value cell,
// or no labels when cell is "").
func gaugeOf(tb testing.TB, reg *prometheus.Registry, name, cell string) prometheus.Collector {
	tb.Helper()
	return collectorFunc(func() float64 {
		v, ok := metricValue(tb, reg, name, map[string]string{"cell": cell})
		if !ok {
			tb.Fatalf("no series %s{cell=%q}", name, cell)
		}
		return v
	})
}

// collectorFunc adapts a value to testutil.ToFloat64.
type collectorFunc func() float64

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc("x", "x", nil, nil)
}

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.GaugeValue, f())
}

func metricValue(tb testing.TB, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func requireCounter(tb testing.TB, reg *prometheus.Registry, name string, labels map[string]string, want float64) {
	tb.Helper()
	v, ok := metricValue(tb, reg, name, labels)
	if !ok || v != want {
		tb.Errorf("%s%v = %v (found %v); want %v", name, labels, v, ok, want)
	}
}

// fakeTransport answers every request at once, so BenchmarkProxyServeHTTP
// measures the router's own work per request on the ReverseProxy path
// (tenant, slot, counters, ReverseProxy) without sockets.
type fakeTransport struct{}

func (fakeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Length": {"2"}}, Body: io.NopCloser(strings.NewReader("ok")),
		ContentLength: 2, Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// discardWriter is a minimal ResponseWriter.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

func BenchmarkProxyServeHTTP(b *testing.B) {
	f := newFixture(b, ProxyConfig{})
	for _, be := range f.p.table.Load().backends {
		be.proxy.Transport = fakeTransport{}
	}
	req := httptest.NewRequest("GET", "http://router/orders?page=2", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	req.Header.Set("X-Request-ID", "fixed")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		f.p.ServeHTTP(w, req)
	}
}

func TestRunStartupErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := config.Config{Tenancy: headerTenancy(), Cells: []config.Cell{{Name: "cell-1", URL: "http://127.0.0.1:1"}}}
	err = Run(context.Background(), cfg, Options{Address: busy.Addr().String(), Registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("busy address: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "slotmap.json")
	if err := os.WriteFile(bad, []byte(`{"cells":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), cfg, Options{Address: "127.0.0.1:0", SlotMapFile: bad, Registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad slot map: %v", err)
	}
	cfg.Tenancy.Source = "carrier-pigeon"
	if err := Run(context.Background(), cfg, Options{Address: "127.0.0.1:0", Registry: prometheus.NewRegistry()}); err == nil || !strings.Contains(err.Error(), "tenancy.source") {
		t.Errorf("bad tenancy: %v", err)
	}
}

// TestProxyFlushesKnownLengthBodies: each write of a body with a
// Content-Length reaches the client at once (a slow download, long
// polling). ReverseProxy (FlushInterval 0) streams only SSE and bodies of
// unknown length on its own: flushWriter flushes the rest.
func TestProxyFlushesKnownLengthBodies(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	next := make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "first")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-next:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, "-last")
	}
	req, _ := http.NewRequest("GET", f.router.URL+"/x/download", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	got := make(chan string, 1)
	var resp *http.Response
	go func() {
		var err error
		if resp, err = http.DefaultClient.Do(req); err != nil {
			got <- err.Error()
			return
		}
		buf := make([]byte, 5)
		_, err = io.ReadFull(resp.Body, buf)
		got <- fmt.Sprint(string(buf), err)
	}()
	select {
	case s := <-got:
		if s != "first<nil>" {
			t.Fatalf("first part %q", s)
		}
	case <-time.After(2 * time.Second):
		close(next)
		t.Fatal("the head and first part were held back by the router")
	}
	defer resp.Body.Close()
	close(next)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "-last" {
		t.Fatalf("rest %q", rest)
	}
}
