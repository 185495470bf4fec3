package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// connTracker records the client address of every request a test cell
// serves, so a test can tell which connection each request came on.
type connTracker struct {
	mu    sync.Mutex
	addrs []string
}

func (c *connTracker) add(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addrs = append(c.addrs, r.RemoteAddr)
}

func (c *connTracker) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range c.addrs {
		seen[a] = true
	}
	return len(seen)
}

// TestDirectReusesConnections: bodiless requests one after another use one
// pooled connection; a POST (request body) goes through the fallback
// transport and still works; a HEAD has no body and keeps the connection.
func TestDirectReusesConnections(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	var ct connTracker
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		ct.add(r)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-UA", r.Header.Get("User-Agent"))
		_, _ = io.WriteString(w, r.Method+":"+string(body))
	}
	for range 10 {
		// An empty User-Agent makes the test client send none.
		resp, body := f.get(t, "/x/get", tenant2, "User-Agent", "")
		if resp.StatusCode != 200 || string(body) != "GET:" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
		if ua := resp.Header.Get("X-UA"); ua != "" {
			t.Fatalf("the cell saw User-Agent %q for a client that sent none", ua)
		}
	}
	if n := ct.distinct(); n != 1 {
		t.Fatalf("10 sequential GETs used %d connections to the cell", n)
	}
	req, _ := http.NewRequest("HEAD", f.router.URL+"/x/head", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", f.router.URL+"/x/post", strings.NewReader("hello"))
	req.Header.Set("X-Tenant-ID", tenant2)
	if _, body := do(t, req); string(body) != "POST:hello" {
		t.Fatalf("POST: %q", body)
	}
	if resp, body := f.get(t, "/x/get", tenant2); resp.StatusCode != 200 || string(body) != "GET:" {
		t.Fatalf("GET after HEAD and POST: %d %q", resp.StatusCode, body)
	}
	// The GETs and the HEAD shared one connection; the POST had its own.
	if n := ct.distinct(); n != 2 {
		t.Fatalf("%d connections; want 2 (pooled direct one, fallback for the body)", n)
	}
}

// TestDirectRetriesConnectionsTheCellClosed: when the cell has closed the
// pooled connections (idle timeout, restart), the next GET is sent again on
// a new connection instead of failing, and nothing counts as an error.
func TestDirectRetriesConnectionsTheCellClosed(t *testing.T) {
	f := newFixture(t, ProxyConfig{FailAfter: 1})
	for range 3 {
		f.seen(t, "/x", tenant2)
	}
	f.cells[1].srv.CloseClientConnections()
	time.Sleep(20 * time.Millisecond) // let the FIN reach the router's side
	for range 3 {
		if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
			t.Fatalf("served by %s", s.Cell)
		}
	}
	if !f.p.CellUp("cell-2") {
		t.Fatal("closed idle connections ejected the cell")
	}
	for _, kind := range []string{"dial", "timeout", "other"} {
		requireCounter(t, f.reg, "cellgate_router_upstream_errors_total", map[string]string{"cell": "cell-2", "kind": kind}, 0)
	}
}

// TestDirectConnectionClose: an answer with Connection: close is not
// pooled; the next request opens a new connection and succeeds.
func TestDirectConnectionClose(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	var ct connTracker
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		ct.add(r)
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	}
	for range 3 {
		if resp, body := f.get(t, "/x/close", tenant2); resp.StatusCode != 200 || string(body) != "bye" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	if n := ct.distinct(); n != 3 {
		t.Fatalf("%d connections for 3 answers with Connection: close", n)
	}
}

// TestDirectClientGoneAbortsTheCellRequest: when the client goes away while
// the cell is still working, the router closes its connection to the cell
// at once (the cell's request context ends), not when the cell answers or
// the header timeout passes.
func TestDirectClientGoneAbortsTheCellRequest(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	entered, cellSawCancel := make(chan struct{}), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			close(cellSawCancel)
		case <-time.After(10 * time.Second):
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.router.URL+"/x/slow", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	select {
	case <-cellSawCancel:
	case <-time.After(3 * time.Second):
		t.Fatal("the cell's request went on after the client left")
	}
	<-done
	// Counted as 499 by the handler, which may still be running.
	be := f.p.table.Load().backends[1]
	waitFor(t, 2*time.Second, func() bool { return be.codes[3].Load() == 1 })
	if !f.p.CellUp("cell-2") {
		t.Fatal("a client going away ejected the cell")
	}
}

// TestDirectPassesInformationalAndTrailers: a 103 Early Hints answer
// reaches the client before the final one, and trailers of a chunked
// answer come through.
func TestDirectPassesInformationalAndTrailers(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "body")
		_ = http.NewResponseController(w).Flush() // chunked: no Content-Length
		w.Header().Set("X-Checksum", "abc")
	}
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", f.router.URL+"/x/hints", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	resp, body := do(t, req)
	if resp.StatusCode != 200 || string(body) != "body" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if len(hints) != 1 || hints[0] != "</style.css>; rel=preload" {
		t.Errorf("1xx seen by the client: %q", hints)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer %q", got)
	}
	// ReverseProxy clears the answer's header after a 1xx, the cell
	// header with it; both paths set it again.
	if got := resp.Header.Get("X-Cellgate-Cell"); got != "cell-2" {
		t.Errorf("cell header after a 1xx: %q", got)
	}
	// The connection went back to the pool after the trailers.
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
		t.Fatal("next request failed")
	}
}

// TestDirectClosesIdleOnEject: ejecting a cell drops its pooled
// connections, and idle ones are closed after idleConnTimeout by the
// health loop's sweep.
func TestDirectClosesIdleOnEject(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	f.seen(t, "/x", tenant2)
	d := f.p.table.Load().backends[1].direct
	idle := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.idle)
	}
	if idle() != 1 {
		t.Fatalf("%d pooled connections after one request", idle())
	}
	d.closeIdle(time.Hour)
	if idle() != 1 {
		t.Fatal("a fresh connection was swept")
	}
	d.closeIdle(time.Nanosecond)
	if idle() != 0 {
		t.Fatal("an old connection was kept")
	}
	f.seen(t, "/x", tenant2)
	f.p.table.Load().backends[1].eject(false, nil)
	if idle() != 0 {
		t.Fatal("ejecting the cell kept its connections")
	}
}

// TestDirectBoundsTheHead: an answer head larger than the limit is a
// transport error (502), as with http.Transport's MaxResponseHeaderBytes.
func TestDirectBoundsTheHead(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	f.p.table.Load().backends[1].direct.maxHead = 1 << 10
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", 4<<10))
		_, _ = io.WriteString(w, "ok")
	}
	if resp, body := f.get(t, "/x/big", tenant2); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("oversized head: %d %s", resp.StatusCode, body)
	}
	f.cells[1].extra = nil
	if s := f.seen(t, "/x", tenant2); s.Cell != "cell-2" {
		t.Fatal("next request failed")
	}
}

// TestDirectClientGoneMidStream: a client that leaves an SSE stream frees
// the cell's request and the router's in-flight slot at once, not at the
// cell's next event.
func TestDirectClientGoneMidStream(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	cellSawCancel := make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			close(cellSawCancel)
		case <-time.After(10 * time.Second):
		}
	}
	req, _ := http.NewRequest("GET", f.router.URL+"/x/events", nil)
	req.Header.Set("X-Tenant-ID", tenant2)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("data: first\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client leaves
	select {
	case <-cellSawCancel:
	case <-time.After(3 * time.Second):
		t.Fatal("the cell's stream went on after the client left")
	}
	be := f.p.table.Load().backends[1]
	waitFor(t, 2*time.Second, func() bool { return be.inflight.Load() == 0 })
}

// TestDirectSendsHeadsLargerThanItsBuffer: a request head larger than a
// cell connection's write buffer leaves in several writes, and only the
// last one waits for the answer (sendread.go); a wait after the first part
// would hold the request until the response header timeout (504).
func TestDirectSendsHeadsLargerThanItsBuffer(t *testing.T) {
	f := newFixture(t, ProxyConfig{ResponseHeaderTimeout: 2 * time.Second})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("a", len(r.Header.Get("X-Big"))/1000))
	}
	big := strings.Repeat("b", 10_000) // the write buffer is 4 KiB
	for range 2 {                      // a new connection, then a pooled one
		start := time.Now()
		resp, body := f.get(t, "/x/big", tenant2, "X-Big", big)
		if resp.StatusCode != 200 || string(body) != "aaaaaaaaaa" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("answered after %s", d)
		}
	}
}
