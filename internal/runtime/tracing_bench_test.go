package runtime

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/telemetry"
)

// metricsOnlyRoute is the per-route middleware as it was before tracing:
// the baseline "no tracing hook at all" of BenchmarkTracingCost.
func metricsOnlyRoute(m *httpMetrics, method, path string) echo.MiddlewareFunc {
	var counts [len(statusClasses)]prometheus.Counter
	for i, class := range statusClasses {
		counts[i] = m.requests.WithLabelValues(path, method, class)
	}
	obs := m.duration.WithLabelValues(path, method)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			returned := false
			defer func() {
				status := http.StatusInternalServerError
				if returned {
					status = c.Response().Status
					if err != nil && !c.Response().Committed {
						status = errorStatus(err).status
					}
				}
				i := status / 100
				if i < 1 || i >= gone {
					i = 0
				}
				if returned && err != nil && !c.Response().Committed && clientGone(c, err) {
					i = gone
				}
				counts[i].Inc()
				obs.Observe(time.Since(start).Seconds())
			}()
			err = next(c)
			returned = true
			return err
		}
	}
}

// BenchmarkTracingCost is the full tenant chain (request scope, HTTP
// observation, tenancy, tenant bulkhead, admission, database permits) in
// one binary: "nohook" with the pre-tracing metrics middleware, "off"
// with the server as cmd/server builds it when no OTEL_* variable is set,
// and "on" with 100 % sampling into an in-memory exporter. The access
// log is off in all three (it is not tracing's cost).
func BenchmarkTracingCost(b *testing.B) {
	trivial := func(c echo.Context, _ shards.Accessor) error { return c.String(http.StatusOK, "ok") }
	exp := tracetest.NewInMemoryExporter()
	build := func(tr *telemetry.Tracing) *Server {
		cfg := testConfig()
		cfg.Server.MaxConcurrentRequests = 10_000
		cfg.Tenancy.MaxConcurrentRequests = 1_000
		cfg.Tenancy.MaxDBConnections = 1_000
		s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }, Tracing: tr})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.bulk.close)
		return s
	}
	off := build(telemetry.Off())
	off.Tenant("GET", "/x", trivial)
	inner := off.bulk.dbPermits.Shard(off.shards, trivial)
	off.echo.Add("GET", "/nohook", chain(chain(inner, off.tenantMW...), metricsOnlyRoute(off.obs.metrics, "GET", "/nohook")))
	on := build(telemetry.New(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample())))
	on.Tenant("GET", "/x", trivial)

	for _, tc := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"nohook", off.Echo(), "/nohook"},
		{"off", off.Echo(), "/x"},
		{"on", on.Echo(), "/x"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", tc.path, nil)
			req.Header.Set("X-Tenant-ID", "acme")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				w.Body.Reset()
				tc.h.ServeHTTP(w, req)
				if n++; n%4096 == 0 {
					exp.Reset()
				}
			}
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		})
	}
}
