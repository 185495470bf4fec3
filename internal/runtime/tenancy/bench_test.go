package tenancy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/tenant"
	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
)

// BenchmarkExtract measures each source against same-run baselines: the
// naive Header.Get of the tenant header, and the floor, a bare map index.
func BenchmarkExtract(b *testing.B) {
	headerReq := newRequest(b)
	headerReq.Header.Set(DefaultHeader, "acme-corp")
	hostReq := newRequest(b)
	hostReq.Host = "acme-corp.example.com:8443"
	sessionReq := cookieRequest(b, DefaultSessionCookie, SignSession(testSessionKey, "acme-corp", testNow.Add(time.Hour)))
	hsReq := bearerRequest(b, mint(b, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme-corp")))
	esReq := bearerRequest(b, mint(b, jwt.SigningMethodES256, ecKeys()["P256"], goodClaims("acme-corp")))
	rsReq := bearerRequest(b, mint(b, jwt.SigningMethodRS256, rsaKeys()[0], goodClaims("acme-corp")))

	b.Run("baseline_HeaderGet", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n += len(headerReq.Header.Get(DefaultHeader))
		}
		if n == 0 {
			b.Fatal("no header")
		}
	})
	// The floor: one map index with the canonical key, no validation.
	b.Run("baseline_HeaderIndex", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n += len(headerReq.Header["X-Tenant-Id"])
		}
		if n == 0 {
			b.Fatal("no header")
		}
	})
	run := func(name string, x Extractor, r *http.Request) {
		b.Run(name, func(b *testing.B) {
			if _, err := x.Extract(r); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.Extract(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("header", newExtractorT(b, Config{}), headerReq)
	run("subdomain", newExtractorT(b, Config{Source: SourceSubdomain, BaseDomain: "example.com"}), hostReq)
	run("session", sessionExtractor(b), sessionReq)
	run("jwt_HS256", hsExtractor(b, nil), hsReq)
	run("jwt_ES256", esExtractor(b), esReq)
	run("jwt_RS256", rsExtractor(b), rsReq)

	b.Run("header_rejected", func(b *testing.B) {
		x := newExtractorT(b, Config{})
		r := newRequest(b)
		r.Header.Set(DefaultHeader, "ac me")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := x.Extract(r); err == nil {
				b.Fatal("accepted")
			}
		}
	})
}

// discardWriter is a reusable http.ResponseWriter, so the benchmark measures
// Echo and the middleware, not httptest.ResponseRecorder.
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
				r.Header.Set(DefaultHeader, tc.id)
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
