package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// ownLoop makes newFixture serve the proxy with the front server's own
// loop (as RunRouter does) instead of net/http's server.
var ownLoop bool

// newOwnLoopFixture is newFixture with the router served by the own loop,
// and that loop's front server.
func newOwnLoopFixture(t *testing.T) (*fixture, *frontServer) {
	t.Helper()
	ownLoop = true
	defer func() { ownLoop = false }()
	f := newFixture(t, ProxyConfig{})
	return f, f.front
}

// dialRaw opens a raw connection to a router at url (or host:port),
// closed when the test ends, with a deadline so a missing answer fails the
// test instead of hanging it.
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

// serveOwnLoop serves p on a loopback port with a frontServer.
func serveOwnLoop(tb testing.TB, p *Proxy, log *slog.Logger) (*httptest.Server, *frontServer) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ln = scanListener{ln}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 30 * time.Second, ConnContext: withScanConn}
	fs := newFrontServer(p, srv, ln.Addr(), log)
	done := make(chan struct{})
	go func() { defer close(done); _ = fs.Serve(ln) }()
	tb.Cleanup(func() { _ = fs.Close(); <-done })
	return &httptest.Server{URL: "http://" + ln.Addr().String(), Listener: ln}, fs
}

// TestOwnLoop runs the request path tests again on the front server's own
// loop: requests it takes (GETs on the lean path, refusals) and those it
// hands to net/http (bodies, upgrades) keep the behaviour they check.
func TestOwnLoop(t *testing.T) {
	rerun(t, &ownLoop, map[string]func(*testing.T){
		"Routes":           TestProxyRoutesTenantsToTheirCells,
		"NoTenant":         TestProxyWithoutTenantGoesToAnyCell,
		"DownCell":         TestProxyDownCellAffectsOnlyItsTenants,
		"PassiveEjection":  TestProxyPassiveEjection,
		"Timeout":          TestProxyTimeout,
		"ConcurrencyCap":   TestProxyConcurrencyCap,
		"SSE":              TestProxyStreamsSSE,
		"RequestBody":      TestProxyStreamsRequestBody,
		"Upgrades":         TestProxyPassesUpgrades,
		"Frozen":           TestProxyFrozenSlots,
		"Subdomain":        TestProxySubdomainTenancy,
		"KnownLength":      TestProxyFlushesKnownLengthBodies,
		"ClientGone":       TestDirectClientGoneAbortsTheCellRequest,
		"Informational":    TestDirectPassesInformationalAndTrailers,
		"ClientGoneStream": TestDirectClientGoneMidStream,
		"ClosedConns":      TestDirectRetriesConnectionsTheCellClosed,
		"LeanParity":       TestLeanPathMatchesReverseProxy,
	})
}

// frontCases are cell answers whose framing the own loop must write as
// net/http does.
var frontCases = map[string]http.HandlerFunc{
	"json": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	},
	"sniffed": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // the cell sends none: the router's server sniffs
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	},
	"empty":     func(w http.ResponseWriter, r *http.Request) {},
	"nocontent": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
	"notmodified": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	},
	"chunked": func(w http.ResponseWriter, r *http.Request) {
		// One flushed write: how several writes split into the router's
		// reads depends on timing, the same on both servers.
		_, _ = io.WriteString(w, "one chunk")
		_ = http.NewResponseController(w).Flush()
	},
	"trailers": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "data")
		_ = http.NewResponseController(w).Flush()
		w.Header().Set("X-Sum", "7")
		w.Header().Set(http.TrailerPrefix+"X-Late", "undeclared")
	},
	"hints": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	},
	"big": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(bytes.Repeat([]byte("0123456789abcdef"), 10000))
	},
	"odd-status": func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
		_, _ = io.WriteString(w, "odd")
	},
}

// TestOwnLoopMatchesNetHTTP sends the same raw requests to a router on the
// own loop and to one on net/http's server, and compares the raw answers
// byte for byte, Date and X-Request-Id aside, on one keep-alive
// connection each (so framing errors show in the next answer).
func TestOwnLoopMatchesNetHTTP(t *testing.T) {
	net1 := newFixture(t, ProxyConfig{})
	own, front := newOwnLoopFixture(t)
	gates := map[*fixture]*drainGate{}
	for _, f := range []*fixture{net1, own} {
		g := &drainGate{entered: make(chan struct{}, 2*len(frontCases)), release: make(chan struct{})}
		gates[f] = g
		for _, c := range f.cells {
			c.extra = func(w http.ResponseWriter, r *http.Request) {
				name := strings.TrimPrefix(r.URL.Path, "/x/")
				if n, ok := strings.CutPrefix(name, "drain/"); ok {
					g.entered <- struct{}{}
					<-g.release
					name = n
				}
				frontCases[name](w, r)
			}
		}
	}
	var heads, drain []string
	for name := range frontCases {
		for _, method := range []string{"GET", "HEAD"} {
			heads = append(heads, method+" /x/"+name+" HTTP/1.1\r\nHost: router.test\r\nX-Tenant-ID: "+tenant2+"\r\nX-Request-ID: fixed\r\n\r\n")
			drain = append(drain, method+" /x/drain/"+name+" HTTP/1.1\r\nHost: router.test\r\nX-Tenant-ID: "+tenant2+"\r\nX-Request-ID: fixed\r\n\r\n")
		}
	}
	// Refusals the router writes itself: no cell for a frozen slot is
	// covered elsewhere; a tenant-less request goes to any cell.
	heads = append(heads, "GET /x/json HTTP/1.1\r\nHost: router.test\r\nConnection: keep-alive\r\n\r\n")
	got := rawExchange(t, own.router.URL, heads)
	want := rawExchange(t, net1.router.URL, heads)
	for i := range heads {
		if got[i] != want[i] {
			t.Errorf("%q:\nown loop:\n%.600q\nnet/http:\n%.600q", heads[i], got[i], want[i])
		}
	}
	if n := front.served.Load(); n != uint64(len(heads)) {
		t.Errorf("own loop served %d of %d requests", n, len(heads))
	}
	// Draining: answers committed once Shutdown has begun say
	// Connection: close, and their connections close.
	got = drainExchange(t, own.router.URL, front.srv, front.Shutdown, gates[own], drain)
	want = drainExchange(t, net1.router.URL, net1.router.Config, net1.router.Config.Shutdown, gates[net1], drain)
	for i := range drain {
		if got[i] != want[i] {
			t.Errorf("draining, %q:\nown loop:\n%.600q\nnet/http:\n%.600q", drain[i], got[i], want[i])
		}
	}
	if n := front.served.Load(); n != uint64(len(heads)+len(drain)) {
		t.Errorf("own loop served %d of %d requests while draining", n-uint64(len(heads)), len(drain))
	}
}

// drainGate holds the requests of a draining comparison at the cell.
type drainGate struct {
	entered chan struct{} // one per request that reached the cell
	release chan struct{} // closed to let them answer
}

// drainExchange sends each head on a connection of its own and, once all
// are held at the cell, starts shutdown (srv is the server whose
// RegisterOnShutdown tells that it began), lets the cell answer, and
// returns each raw answer without its Date.
func drainExchange(t *testing.T, url string, srv *http.Server, shutdown func(context.Context) error, g *drainGate, heads []string) []string {
	t.Helper()
	conns := make([]net.Conn, len(heads))
	for i, head := range heads {
		conns[i] = dialRaw(t, url)
		if _, err := io.WriteString(conns[i], head); err != nil {
			t.Fatal(err)
		}
	}
	for range heads {
		<-g.entered
	}
	began := make(chan struct{})
	srv.RegisterOnShutdown(func() { close(began) })
	shut := make(chan error, 1)
	go func() { shut <- shutdown(context.Background()) }()
	<-began
	close(g.release)
	out := make([]string, len(heads))
	for i, head := range heads {
		r := newRawReader(conns[i])
		out[i] = r.answer(t, head)
		if _, err := r.br.ReadByte(); err != io.EOF {
			t.Errorf("%q: the connection stays open while draining (%v)", head, err)
		}
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	return out
}

var dateLine = regexp.MustCompile(`(?m)^Date: .*\r\n`)

// rawExchange sends each head on one connection, one at a time, and
// returns each raw answer (1xx answers included) without its Date.
func rawExchange(t *testing.T, url string, heads []string) []string {
	t.Helper()
	conn := dialRaw(t, url)
	r := newRawReader(conn)
	out := make([]string, len(heads))
	for i, head := range heads {
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		out[i] = r.answer(t, head)
	}
	return out
}

// rawReader reads the raw answers on one connection. Each answer is read
// whole before the next request goes out, so raw holds exactly one
// exchange.
type rawReader struct {
	raw bytes.Buffer
	br  *bufio.Reader
}

func newRawReader(conn net.Conn) *rawReader {
	r := &rawReader{}
	r.br = bufio.NewReader(io.TeeReader(conn, &r.raw))
	return r
}

// answer reads the answer to head, 1xx answers included, and returns it
// raw without its Date.
func (r *rawReader) answer(t *testing.T, head string) string {
	t.Helper()
	r.raw.Reset()
	method, _, _ := strings.Cut(head, " ")
	for {
		resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%q: %v (read %q)", head, err, r.raw.String())
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 {
			break
		}
	}
	return dateLine.ReplaceAllString(r.raw.String(), "")
}

// TestOwnLoopHandsOver: on one connection, requests the own loop does not
// take (a body, HTTP/1.0, a probe path, a malformed head) go to net/http,
// which answers them as before and keeps serving the connection.
func TestOwnLoopHandsOver(t *testing.T) {
	f, front := newOwnLoopFixture(t)
	for _, tc := range []struct{ name, head, status string }{
		{"post", "POST /x HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: " + tenant2 + "\r\nContent-Length: 2\r\n\r\n{}", "HTTP/1.1 200 OK"},
		{"http10", "GET /x HTTP/1.0\r\nHost: r\r\nX-Tenant-ID: " + tenant2 + "\r\n\r\n", "HTTP/1.0 200 OK"},
		{"bad", "GET /x HTTP/1.1\r\nHost: r\r\nBad Header: x\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"nohost", "GET /x HTTP/1.1\r\nX-Tenant-ID: " + tenant2 + "\r\n\r\n", "HTTP/1.1 400 Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, f.router.URL)
			// A lean request first, served by the own loop, then the one
			// it hands over, on the same connection.
			before := front.handed.Load()
			_, _ = io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: "+tenant2+"\r\n\r\n"+tc.head)
			br := bufio.NewReader(conn)
			for i, want := range []string{"HTTP/1.1 200 OK", tc.status} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				if got := resp.Proto + " " + resp.Status; !strings.HasPrefix(got, want) {
					t.Fatalf("answer %d: %q, want %q", i, got, want)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.Close {
					break
				}
			}
			if front.handed.Load() != before+1 {
				t.Fatal("the connection was not handed over")
			}
		})
	}
}

// TestOwnLoopBareLF: a request head whose lines end in LF alone, which
// net/http accepts, is served too (the loop must find where it ends).
func TestOwnLoopBareLF(t *testing.T) {
	f, front := newOwnLoopFixture(t)
	conn := dialRaw(t, f.router.URL)
	before := front.served.Load()
	_, _ = io.WriteString(conn, "GET /x HTTP/1.1\nHost: r\nX-Tenant-ID: "+tenant2+"\n\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || front.served.Load() != before+1 {
		t.Fatalf("status %d, served by the own loop: %v", resp.StatusCode, front.served.Load() == before+1)
	}
}

// TestOwnLoopShutdown: Shutdown closes idle connections at once and lets
// a request in flight finish.
func TestOwnLoopShutdown(t *testing.T) {
	f, front := newOwnLoopFixture(t)
	entered, release := make(chan struct{}), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "late")
	}
	f.get(t, "/x", tenant2) // leaves an idle keep-alive connection
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", f.router.URL+"/x/slow", nil)
		req.Header.Set("X-Tenant-ID", tenant2)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	<-entered // the request is at the cell (the router's in-flight count may still hold the first one)
	shut := make(chan error, 1)
	go func() { shut <- front.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if r := <-res; r.err != nil || r.body != "late" {
		t.Fatalf("request in flight: %q %v", r.body, r.err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// TestOwnLoopShutdownDeadline: when Shutdown's context ends, the requests
// still in flight are cancelled however recently they started (here just
// before Shutdown, so no sweep watched them yet), and Shutdown returns
// soon after, reporting the deadline once, instead of waiting for cells
// that never answer. A request handed to net/http is in flight as well.
func TestOwnLoopShutdownDeadline(t *testing.T) {
	f, front := newOwnLoopFixture(t)
	lean, handed, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the fixture's cleanups
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			close(handed)
		} else {
			close(lean)
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	post := dialRaw(t, f.router.URL)
	_, _ = io.WriteString(post, "POST /x/post HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: "+tenant2+"\r\nContent-Length: 2\r\n\r\n{}")
	<-handed
	get := dialRaw(t, f.router.URL)
	_, _ = io.WriteString(get, "GET /x/get HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: "+tenant2+"\r\n\r\n")
	<-lean
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- front.Shutdown(ctx) }()
	select {
	case err := <-shut:
		if err == nil || err.Error() != context.DeadlineExceeded.Error() {
			t.Fatalf("Shutdown: %q, want the deadline once", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown went on past its deadline, waiting for a request it did not cancel")
	}
}

// TestOwnLoopPipelined: requests pipelined on one connection are answered
// in order while the sweep looks at the first one running (it starts no
// client watch: the next request's bytes are buffered). Under -race it
// checks that the sweep and the loop share the watch state safely.
func TestOwnLoopPipelined(t *testing.T) {
	f, _ := newOwnLoopFixture(t)
	entered, release := make(chan struct{}, 2), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, r.URL.Path)
	}
	conn := dialRaw(t, f.router.URL)
	head := func(path string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: " + tenant2 + "\r\n\r\n"
	}
	_, _ = io.WriteString(conn, head("/x/1")+head("/x/2"))
	<-entered
	// Let the sweep find the first request running; waiting on it instead
	// would order its reads before the loop's next writes, hiding a race.
	time.Sleep(3 * frontSweep)
	close(release)
	br := bufio.NewReader(conn)
	for _, want := range []string{"/x/1", "/x/2"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != want {
			t.Fatalf("answer %q %v, want %q", body, err, want)
		}
	}
}

// TestWriteHeaderMatchesWriteSubset: the own loop's header writer writes
// what http.Header.WriteSubset writes for the same header and exclusions:
// sorted keys, invalid names dropped, CR and LF in values made spaces,
// values trimmed, trailer keys and the named keys left out.
func TestWriteHeaderMatchesWriteSubset(t *testing.T) {
	h := http.Header{
		"Content-Type":      {"text/plain"},
		"X-B":               {"  padded\t", "two"},
		"X-A":               {"split\r\nvalue", "\nedge\r"},
		"Bad Name":          {"dropped"},
		"":                  {"empty name"},
		"Content-Length":    {"3"},
		"Transfer-Encoding": {"chunked"},
		"Connection":        {"keep-alive"},
		"Trailer:X-T":       {"late"},
		"X-Empty":           {""},
	}
	cases := []struct {
		skip    headerSkip
		exclude []string
	}{
		{0, nil},
		{skipTransferEncoding, []string{"Trailer:X-T", "Transfer-Encoding"}},
		{skipConnection | skipContentLength | skipTransferEncoding | skipContentType,
			[]string{"Trailer:X-T", "Connection", "Content-Length", "Transfer-Encoding", "Content-Type"}},
		{skipContentLength | skipTransferEncoding, []string{"Content-Length", "Transfer-Encoding"}},
	}
	for _, c := range cases {
		var want, got bytes.Buffer
		exclude := map[string]bool{}
		for _, k := range c.exclude {
			exclude[k] = true
		}
		if err := h.WriteSubset(&want, exclude); err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriter(&got)
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		writeHeader(bw, h, keys, c.skip)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("skip %b:\n got %q\nwant %q", c.skip, got.String(), want.String())
		}
	}
}

// FuzzWriteHeader: for any two keys, any values and any skip set,
// writeHeader writes what WriteSubset writes with the same keys excluded.
func FuzzWriteHeader(f *testing.F) {
	f.Add("Content-Length", "3", "x-a", " a\r\nb\t", uint8(skipContentLength))
	f.Add("Trailer:X", "t", "Connection", "close", uint8(skipConnection|skipTransferEncoding))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, bits uint8) {
		h := http.Header{k1: {v1, v2}, k2: {v2}}
		skip := headerSkip(bits)
		exclude := map[string]bool{}
		for k := range h {
			if skip.skips(k) {
				exclude[k] = true
			}
		}
		var want, got bytes.Buffer
		if err := h.WriteSubset(&want, exclude); err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriter(&got)
		writeHeader(bw, h, slices.Collect(maps.Keys(h)), skip)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("got %q\nwant %q", got.String(), want.String())
		}
	})
}
