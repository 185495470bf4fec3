package runtime

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/shards"
)

// BenchmarkChain measures the server's request path without a network: a
// trivial handler behind bare Echo, behind the runtime's public chain, and
// behind the full tenant chain (tenancy, tenant bulkhead with request and
// database caps, server admission, HTTP metrics), so -benchmem shows what
// each layer costs per request.
func BenchmarkChain(b *testing.B) {
	trivial := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	bare := echo.New()
	bare.GET("/x", trivial)

	cfg := testConfig()
	cfg.Server.MaxConcurrentRequests = 10_000
	cfg.Tenancy.MaxConcurrentRequests = 1_000
	cfg.Tenancy.MaxDBConnections = 1_000
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.bulk.close()
	s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return trivial(c) })
	s.Public("GET", "/p", trivial)

	for _, tc := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"bare", bare, "/x"},
		{"public", s.Echo(), "/p"},
		{"tenant", s.Echo(), "/x"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", tc.path, nil)
			req.Header.Set("X-Tenant-ID", "acme")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				w.Body.Reset()
				tc.h.ServeHTTP(w, req)
			}
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		})
	}
}
