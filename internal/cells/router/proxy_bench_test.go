package router

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/httpguard"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkProxyLoopback sends requests through Proxy.ServeHTTP to an
// httptest cell on loopback that answers "ok", one at a time (run with
// -benchmem). The cell's net/http server runs in this process, so its
// allocations are counted too: /transport is the same request sent by the
// cell's Transport alone, and /proxy minus /transport is what the proxy
// handler adds per request (the edge's rules, tenant, slot, caps,
// ReverseProxy's outgoing request, the answer's header and body copied to
// the client).
func BenchmarkProxyLoopback(b *testing.B) {
	f := newFixture(b, ProxyConfig{})
	f.cells[1].extra = func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Length"] = []string{"2"}
		_, _ = io.WriteString(w, "ok")
	}
	be := f.p.table.Load().backends[1]

	b.Run("transport", func(b *testing.B) {
		req, err := http.NewRequest("GET", f.cells[1].srv.URL+"/x/ok", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("X-Tenant-ID", tenant2)
		req.Header.Set("X-Request-ID", "fixed")
		b.ReportAllocs()
		for b.Loop() {
			resp, err := be.transport.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("proxy", func(b *testing.B) {
		req := httptest.NewRequest("GET", "http://router/x/ok", nil)
		req.Header.Set("X-Tenant-ID", tenant2)
		req.Header.Set("X-Request-ID", "fixed")
		w := &discardWriter{h: http.Header{}}
		ok0 := be.codes[1].Load()
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			f.p.ServeHTTP(w, req)
		}
		if n := be.codes[1].Load() - ok0; n != uint64(b.N) {
			b.Fatalf("%d of %d requests answered 2xx", n, b.N)
		}
	})
}

// rawCellAnswer is what rawCell answers to every request: the shape of a
// cell's JSON answer (a few headers, a short known-length body), encoded
// once by net/http.
var rawCellAnswer = func() string {
	body := `{"name":"cellgate","ok":true}` + "\r\n"
	var b strings.Builder
	_ = (&http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(body)),
		Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{
			"Content-Type": {"application/json"}, "Vary": {"Origin"},
			"X-Request-Id": {"0123456789ab-1"}, "Date": {"Mon, 02 Jan 2006 15:04:05 GMT"},
		}}).Write(&b)
	return b.String()
}()

// startRawCell serves rawCellAnswer to every request head on loopback,
// without net/http, so an in-process benchmark counts only the router's
// allocations and CPU.
func startRawCell(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				answer := []byte(rawCellAnswer)
				for {
					if _, err := readHead(br); err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readHead reads one head up to its empty line, returning its length.
func readHead(br *bufio.Reader) (int, error) {
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		n += len(line)
		if err != nil {
			return n, err
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			return n, nil
		}
	}
}

// BenchmarkServeLoopback sends GETs one at a time on one keep-alive
// connection through the router's server (net/http on the guarded
// listener, as Run serves) to a raw cell on loopback (run with -benchmem).
// Client and cell use plain sockets and allocate nothing per request, so
// allocs/op is the router's: the head scan and parse, the edge's rules,
// routing, the forwarded request, the cell's answer, the answer to the
// client.
func BenchmarkServeLoopback(b *testing.B) {
	cellURL := startRawCell(b)
	r, err := cells.New([]cells.CellSpec{{Name: "cell-1", URL: cellURL, Slots: []string{"0-16383"}}})
	if err != nil {
		b.Fatal(err)
	}
	x, err := Extractor(headerTenancy(), os.Getenv, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := NewProxy(ProxyConfig{HealthInterval: time.Hour, Logger: log}, x, r, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	front := httptest.NewUnstartedServer(p)
	front.Listener = httpguard.Listener{Listener: front.Listener, HeaderTimeout: time.Minute}
	httpguard.Install(front.Config)
	front.Start()
	b.Cleanup(front.Close)
	be := p.table.Load().backends[0]
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	head := []byte("GET / HTTP/1.1\r\nHost: router.test\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"X-Tenant-Id: " + tenant2 + "\r\nAccept-Encoding: gzip\r\n\r\n")
	br := bufio.NewReader(conn)
	body := make([]byte, 64)
	served := be.codes[1].Load()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(head); err != nil {
			b.Fatal(err)
		}
		n, err := readHead(br)
		if err != nil {
			b.Fatal(err)
		}
		if n < 100 {
			b.Fatalf("short answer head (%d bytes)", n)
		}
		if _, err := io.ReadFull(br, body[:31]); err != nil {
			b.Fatal(err)
		}
	}
	if n := be.codes[1].Load() - served; n != uint64(b.N) {
		b.Fatalf("the router served %d of %d requests", n, b.N)
	}
}

// BenchmarkTenantAdmission is the per-tenant cap's share of a routed
// request: one admission and one release of a known tenant on the Proxy's
// engine. Run with -benchmem: 0 allocs/op (docs/cells.md).
func BenchmarkTenantAdmission(b *testing.B) {
	f := newFixture(b, ProxyConfig{})
	e := f.p.tenants
	p, _ := e.Admit(tenant2, 1) // the tenant exists from here on
	p.Release()
	b.ReportAllocs()
	for b.Loop() {
		p, o := e.Admit(tenant2, 1)
		if o != admission.Admitted {
			b.Fatal(o)
		}
		p.Release()
	}
}
