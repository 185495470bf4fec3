package tenantmw

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/tenancy"
	"github.com/cellgate/cellgate/internal/tenant"
)

// discardWriter is a reusable http.ResponseWriter that keeps only the
// status, so the benchmark measures the middleware, not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkMiddleware serves a request through Echo with and without the
// tenancy middleware (header source); "baseline" is the same Echo app
// without it, so the difference is the middleware's whole cost, and
// "baseline_ctx_only" is the part of that cost no implementation can avoid.
func BenchmarkMiddleware(b *testing.B) {
	handler := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	newApp := func(b *testing.B, mws ...echo.MiddlewareFunc) *echo.Echo {
		e := echo.New()
		e.Use(mws...)
		e.GET("/*", handler)
		return e
	}
	mw, err := WithConfig(Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctxOnly := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			c.SetRequest(r.WithContext(tenant.With(r.Context(), "acme-corp")))
			return next(c)
		}
	}
	cases := []struct {
		name string
		app  *echo.Echo
		path string
		id   string
		want int
	}{
		{"baseline", newApp(b), "/orders", "acme-corp", http.StatusNoContent},
		// What any tenancy middleware must pay: a middleware closure and
		// putting an id into the request's context.Context.
		{"baseline_ctx_only", newApp(b, ctxOnly), "/orders", "acme-corp", http.StatusNoContent},
		{"header", newApp(b, mw), "/orders", "acme-corp", http.StatusNoContent},
		{"header_skipped_probe", newApp(b, mw), "/healthz", "", http.StatusNoContent},
		{"header_rejected", newApp(b, mw), "/orders", "ac me", http.StatusBadRequest},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.id != "" {
				r.Header.Set(tenancy.DefaultHeader, tc.id)
			}
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				tc.app.ServeHTTP(w, r)
				if w.code != tc.want {
					b.Fatalf("status %d, want %d", w.code, tc.want)
				}
			}
		})
	}
}
