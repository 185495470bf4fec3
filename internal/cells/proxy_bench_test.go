package cells

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkProxyLoopback sends requests through Proxy.ServeHTTP to an
// httptest cell on loopback that answers "ok", one at a time (run with
// -benchmem). The cell's net/http server runs in this process, so its
// allocations are counted too: /transport is the same request sent by the
// cell's direct transport alone, and /proxy minus /transport is what the
// proxy handler (tenant, slot, ReverseProxy, headers) adds per request.
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
			resp, err := be.direct.RoundTrip(req)
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
