package router

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/httpguard"
)

// sendRaw sends raw on a new connection and returns the answer's
// status and body, and whether the router closed the connection after it.
func sendRaw(t *testing.T, url, raw string) (status int, body string, closed bool) {
	t.Helper()
	conn := dialRaw(t, url)
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", raw, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	closed = err != nil && !(asNetError(err, &ne) && ne.Timeout())
	return resp.StatusCode, string(b), closed
}

func asNetError(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	*ne = e
	return ok
}

// A client's malformed body is answered 400 and closed by the router, and
// never counts against the cell, however often it happens.
func TestProxyClientBodyFaultsNeverEject(t *testing.T) {
	f := newFixture(t, ProxyConfig{FailAfter: 2})
	be := f.p.table.Load().backends[1]
	for range 5 {
		code, body, closed := sendRaw(t, f.router.URL, "POST /x/body HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: "+tenant2+
			"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
		if code != 400 || !strings.Contains(body, `"code":"bad_request_body"`) || !closed {
			t.Fatalf("malformed chunk: %d %s closed=%v", code, body, closed)
		}
	}
	if !f.p.CellUp("cell-2") || be.passiveFails.Load() != 0 || be.ejectPassive.Load() != 0 || be.clientFaults.Load() != 5 {
		t.Fatalf("cell-2 up=%v passive fails %d ejections %d client faults %d", f.p.CellUp("cell-2"),
			be.passiveFails.Load(), be.ejectPassive.Load(), be.clientFaults.Load())
	}
	if s := f.seen(t, "/x", tenant2b); s.Cell != "cell-2" {
		t.Fatalf("victim on %q", s.Cell)
	}
}

// A body that stalls is cut at the grace period with 408, not held.
func TestProxyStalledBodyTimesOut(t *testing.T) {
	f := newFixture(t, ProxyConfig{BodyRateGrace: 300 * time.Millisecond, MinBodyRate: 1000, BodyTimeout: 5 * time.Second})
	start := time.Now()
	code, body, closed := sendRaw(t, f.router.URL, "POST /x/body HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: "+tenant2+
		"\r\nContent-Length: 200\r\n\r\nx")
	if took := time.Since(start); code != 408 || !strings.Contains(body, `"code":"body_too_slow"`) || !closed || took > 3*time.Second {
		t.Fatalf("stalled body: %d %s closed=%v after %s", code, body, closed, took)
	}
	if !f.p.CellUp("cell-2") || f.p.table.Load().backends[1].passiveFails.Load() != 0 {
		t.Fatal("a stalled body counted against the cell")
	}
}

// One tenant at its router cap gets 503 tenant_overloaded; another
// tenant of the same cell is served.
func TestProxyTenantCap(t *testing.T) {
	f := newFixture(t, ProxyConfig{MaxInFlightPerTenant: 2})
	entered, release := make(chan struct{}), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}
	done := make(chan int, 2)
	for range 2 {
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
	}
	resp, body := f.get(t, "/other", tenant2)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"code":"tenant_overloaded"`) {
		t.Fatalf("over the tenant cap: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if s := f.seen(t, "/other", tenant2b); s.Cell != "cell-2" {
		t.Fatalf("the other tenant of cell-2: %q", s.Cell)
	}
	close(release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Fatalf("held request: %d", code)
		}
	}
	if n := f.p.table.Load().backends[1].rejectTenant.Load(); n != 1 {
		t.Errorf("tenant rejections = %d", n)
	}
}

// The router's own refusals of requests it must not forward: the cells'
// answers (httpguard), given before any routing.
func TestProxyFramingRefusals(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	for _, c := range []struct {
		raw  string
		want *httpguard.Problem
	}{
		{"POST /x/a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", httpguard.ErrAmbiguousFraming},
		{"POST /x/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", httpguard.ErrObsFold},
		{"GET /x/a HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", httpguard.ErrObsFold},
		{"POST /x/a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", httpguard.ErrAmbiguousFraming},
		{"get /x/a HTTP/1.1\r\nHost: x\r\n\r\n", httpguard.ErrMethodUnknown},
		{"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", httpguard.ErrMethodNotAllowed},
		{"TRACE /x/a HTTP/1.1\r\nHost: x\r\n\r\n", httpguard.ErrMethodNotAllowed},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", httpguard.ErrVersion},
		{"GET /x/a HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: " + tenant2 + "\r\nConnection: X-Tenant-ID\r\n\r\n", httpguard.ErrHopByHopIdentity},
		{"GET /x/a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, cookie\r\n\r\n", httpguard.ErrHopByHopIdentity},
	} {
		hits := f.cells[0].hits.Load() + f.cells[1].hits.Load()
		code, body, closed := sendRaw(t, f.router.URL, c.raw)
		if code != c.want.Status || body != string(c.want.Body()) || !closed {
			t.Errorf("%q: %d %s closed=%v, want %d %s and closed", c.raw, code, body, closed, c.want.Status, c.want.Body())
		}
		if f.cells[0].hits.Load()+f.cells[1].hits.Load() != hits {
			t.Errorf("%q reached a cell", c.raw)
		}
	}
}

// A cell answering a status outside 100-599 gets 502 on its behalf (a
// malformed answer, counted against the cell): no such code reaches the
// wire.
func TestProxyNeverWritesNonStandardStatus(t *testing.T) {
	f := newFixture(t, ProxyConfig{FailAfter: 100})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(799)
		_, _ = io.WriteString(w, "no")
	}
	for _, method := range []string{"GET", "POST"} {
		var in io.Reader
		if method == "POST" {
			in = strings.NewReader("body")
		}
		req, _ := http.NewRequest(method, f.router.URL+"/x/odd", in)
		req.Header.Set("X-Tenant-ID", tenant2)
		resp, body := do(t, req)
		if resp.StatusCode != 502 || !strings.Contains(string(body), "cell_error") {
			t.Errorf("%s: a cell's 799 reached the client as %d %s", method, resp.StatusCode, body)
		}
	}
	if n := f.p.table.Load().backends[1].passiveFails.Load(); n != 2 {
		t.Errorf("passive failures = %d, want 2 (a malformed answer is the cell's fault)", n)
	}
}

// Requests without a tenant share one account of the tenant cap, so
// leaving the tenant out is no way around it.
func TestProxyTenantlessRequestsShareACap(t *testing.T) {
	f := newFixture(t, ProxyConfig{MaxInFlightPerTenant: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	for _, c := range f.cells {
		c.extra = func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
		}
	}
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(f.router.URL + "/x/hold")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	resp, body := f.get(t, "/other", "")
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"tenant_overloaded"`) {
		t.Fatalf("a second tenant-less request: %d %s", resp.StatusCode, body)
	}
	if s := f.seen(t, "/other", tenant2); s.Cell != "cell-2" {
		t.Fatalf("a tenant's request: %q", s.Cell)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
}

// dialRaw opens a raw connection to the router at url.
func dialRaw(tb testing.TB, url string) net.Conn {
	tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}
