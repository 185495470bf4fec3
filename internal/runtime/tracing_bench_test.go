package runtime

import (
	"context"
	"encoding/binary"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

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
//
// "on" exports through a blocking batch span processor, as FromEnv sets
// up every exporter: a synchronous processor would copy each span into
// the exporter on the request's goroutine, which no production setup
// does. The batcher's export goroutine runs in the same process, so its
// allocations count in allocs/op and its instructions in a callgrind run;
// blocking means no span is dropped (the run checks that the exporter got
// one span per request, after a flush inside the timed part).
func BenchmarkTracingCost(b *testing.B) {
	off := tracingBenchServer(b, telemetry.Off())
	for _, tc := range []struct {
		name   string
		path   string
		traced bool
	}{
		{"nohook", "/nohook", false},
		{"off", "/x", false},
		{"on", "/x", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := off.Echo()
			var exp *countingExporter
			var tr *telemetry.Tracing
			if tc.traced {
				// A tracer of its own, shut down when this run ends: its
				// records and the exporter's kept batch are no live heap
				// while the other chains run (with -count, after it).
				exp = newCountingExporter()
				tr = benchTracing(b, exp)
				b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
				h = tracingBenchServer(b, tr).Echo()
			}
			req := tenantRequest(tc.path)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				w.Body.Reset()
				h.ServeHTTP(w, req)
				n++
			}
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
			if tc.traced {
				b.StartTimer()
				flush(b, tr)
				b.StopTimer()
				exp.mustHaveExported(b, tr, n)
			}
		})
	}
}

// BenchmarkTracingCostPaired times the chains of BenchmarkTracingCost in
// turns instead of one after another: each of tracingRounds rounds runs
// b.N requests through "nohook" and "off" (in turn order) and then "on",
// each right after a collection, and reports the medians over the rounds
// of each chain's ns per request and of the rounds' ratios of those
// (nohook-ns/off-ns and off-ns/on-ns: 1 costs nothing, 0.8 is "on" taking
// a quarter longer; ns/op is the "on" chain's). A round takes about a second, so
// the drift of a shared machine between sub-benchmarks seconds apart, which
// moves BenchmarkTracingCost's ratios by a fifth from run to run, falls on
// all three chains alike. "On" gets a tracer and an exporter of its own
// in each round, shut down after it, and runs last: its queued and free
// records and the exporter's kept batch are never live heap while another
// chain runs (the collector would mark them in that chain's cycles).
// allocs are per request, the export goroutine's included.
func BenchmarkTracingCostPaired(b *testing.B) {
	const tracingRounds = 10
	off := tracingBenchServer(b, telemetry.Off())
	// timeChain runs n requests through h after a collection, returning
	// ns and allocations per request.
	timeChain := func(h http.Handler, r *http.Request, n int, flush func()) (ns, allocs float64) {
		w := httptest.NewRecorder()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		for range n {
			w.Body.Reset()
			h.ServeHTTP(w, r)
		}
		if flush != nil {
			flush()
		}
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
		return float64(d.Nanoseconds()) / float64(n), float64(after.Mallocs-before.Mallocs) / float64(n)
	}
	var nohookNs, offNs, onNs, nohookOverOff, offOverOn []float64
	var allocs [3]float64
	b.ResetTimer()
	for round := range tracingRounds {
		var nh, of float64
		if round%2 == 0 {
			nh, allocs[0] = timeChain(off.Echo(), tenantRequest("/nohook"), b.N, nil)
			of, allocs[1] = timeChain(off.Echo(), tenantRequest("/x"), b.N, nil)
		} else {
			of, allocs[1] = timeChain(off.Echo(), tenantRequest("/x"), b.N, nil)
			nh, allocs[0] = timeChain(off.Echo(), tenantRequest("/nohook"), b.N, nil)
		}
		exp := newCountingExporter()
		tr := benchTracing(b, exp)
		on := tracingBenchServer(b, tr)
		o, a := timeChain(on.Echo(), tenantRequest("/x"), b.N, func() { flush(b, tr) })
		allocs[2] = a
		exp.mustHaveExported(b, tr, b.N)
		if err := tr.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		nohookNs, offNs, onNs = append(nohookNs, nh), append(offNs, of), append(onNs, o)
		nohookOverOff, offOverOn = append(nohookOverOff, nh/of), append(offOverOn, of/o)
	}
	b.StopTimer()
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	b.ReportMetric(median(onNs), "ns/op")
	b.ReportMetric(median(nohookNs), "nohook-ns/req")
	b.ReportMetric(median(offNs), "off-ns/req")
	b.ReportMetric(median(onNs), "on-ns/req")
	b.ReportMetric(median(nohookOverOff), "nohook-ns/off-ns")
	b.ReportMetric(median(offOverOn), "off-ns/on-ns")
	b.ReportMetric(allocs[0], "nohook-allocs/req")
	b.ReportMetric(allocs[1], "off-allocs/req")
	b.ReportMetric(allocs[2], "on-allocs/req")
}

// tenantRequest is a GET of path from tenant acme.
func tenantRequest(path string) *http.Request {
	r := httptest.NewRequest("GET", path, nil)
	r.Header.Set("X-Tenant-ID", "acme")
	return r
}

// tracingBenchServer is the server of the tracing benchmarks with tr: the
// tenant chain on GET /x answering "ok", and, when tr is off, the same
// chain with the pre-tracing metrics middleware on GET /nohook.
func tracingBenchServer(b *testing.B, tr *telemetry.Tracing) *Server {
	trivial := func(c echo.Context, _ shards.Accessor) error { return c.String(http.StatusOK, "ok") }
	cfg := testConfig()
	cfg.Server.MaxConcurrentRequests = 10_000
	cfg.Tenancy.MaxConcurrentRequests = 1_000
	cfg.Tenancy.MaxDBConnections = 1_000
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }, Tracing: tr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.bulk.close)
	s.Tenant("GET", "/x", trivial)
	if s.obs.tracer == nil {
		inner := s.bulk.dbPermits.Shard(s.shards, trivial)
		s.echo.Add("GET", "/nohook", chain(chain(inner, s.tenantMW...), metricsOnlyRoute(s.obs.metrics, "GET", "/nohook")))
	}
	return s
}

// benchTracing is tracing as FromEnv sets it up with
// OTEL_TRACES_SAMPLER=always_on, exporting to exp through a blocking
// batcher sized by the OTEL_BSP_* variables, as FromEnv reads them (the
// defaults when unset).
func benchTracing(b *testing.B, exp telemetry.SpanExporter) *telemetry.Tracing {
	batch, err := telemetry.BatchConfigFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	batch.Blocking = true
	on := telemetry.AlwaysOn()
	return telemetry.New(telemetry.Config{Sampler: &on, Batch: batch}, exp)
}

// countingExporter is the in-memory exporter: it encodes each batch into
// a buffer it reuses, in place of the last one, and counts the spans it
// got so the benchmark can show that none was dropped. A buffer of bytes
// holding one batch is what an OTLP exporter holds (the batch it is
// sending); keeping the spans themselves, or thousands of them, would
// make the benchmark measure the garbage collector marking a heap of
// finished spans that no production exporter keeps.
type countingExporter struct {
	n    atomic.Int64
	last []byte
}

// ExportSpans counts the spans and encodes every field of each in place
// of the last batch: the records go back to the recorder's free list
// when it returns.
func (e *countingExporter) ExportSpans(_ context.Context, spans []*telemetry.SpanRecord) error {
	e.n.Add(int64(len(spans)))
	buf := e.last[:0]
	for _, r := range spans {
		sc, parent := r.SpanContext(), r.Parent()
		tid, sid, pid := sc.TraceID(), sc.SpanID(), parent.SpanID()
		buf = append(append(append(buf, tid[:]...), sid[:]...), pid[:]...)
		buf = append(buf, byte(sc.TraceFlags()), byte(r.Kind()))
		buf = appendString(buf, sc.TraceState().String())
		buf = binary.AppendVarint(buf, r.StartTime().UnixNano())
		buf = binary.AppendVarint(buf, r.EndTime().UnixNano())
		buf = appendString(buf, r.Name())
		status, description := r.Status()
		buf = appendString(append(buf, byte(status)), description)
		buf = appendAttrs(buf, r.Attributes())
		events := r.Events()
		buf = binary.AppendUvarint(buf, uint64(len(events)))
		for _, ev := range events {
			buf = appendAttrs(binary.AppendVarint(appendString(buf, ev.Name), ev.Time.UnixNano()), ev.Attributes)
		}
		links := r.Links()
		buf = binary.AppendUvarint(buf, uint64(len(links)))
		for _, l := range links {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			buf = appendAttrs(append(append(buf, ltid[:]...), lsid[:]...), l.Attributes)
		}
	}
	e.last = buf
	return nil
}

// appendString appends s, its length first.
func appendString(buf []byte, s string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(s))), s...)
}

// appendAttrs appends attrs, their count first: each key, its value's
// type, and the value.
func appendAttrs(buf []byte, attrs []attribute.KeyValue) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(attrs)))
	for _, a := range attrs {
		buf = append(appendString(buf, string(a.Key)), byte(a.Value.Type()))
		switch a.Value.Type() {
		case attribute.BOOL:
			buf = strconv.AppendBool(buf, a.Value.AsBool())
		case attribute.INT64:
			buf = binary.AppendVarint(buf, a.Value.AsInt64())
		case attribute.FLOAT64:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(a.Value.AsFloat64()))
		case attribute.STRING:
			buf = appendString(buf, a.Value.AsString())
		default: // the slices: none in the benchmark's spans
			buf = appendString(buf, a.Value.String())
		}
	}
	return buf
}

// Shutdown drops the kept batch (the exporter holds no connection): once
// its tracer is shut down, what it kept is no live heap for the chains
// measured after it to mark.
func (e *countingExporter) Shutdown(context.Context) error {
	e.last = nil
	return nil
}

// newCountingExporter is an empty countingExporter.
func newCountingExporter() *countingExporter { return &countingExporter{} }

// BenchmarkTracingFloor is the recorder's own cost under
// BenchmarkTracingCost's "on" setup (same sampler, batcher and exporter):
// a bare server span started and ended with the route's attributes,
// nothing of the HTTP chain. It is the floor "on" cannot go below.
func BenchmarkTracingFloor(b *testing.B) {
	exp := newCountingExporter()
	tr := benchTracing(b, exp)
	defer func() { _ = tr.Shutdown(context.Background()) }()
	tracer := tr.Tracer("floor")
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	attrs := []attribute.KeyValue{attribute.String("http.request.method", "GET"), attribute.String("http.route", "/x"),
		attribute.Int("http.response.status_code", 200)}
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		_, span := tracer.Start(ctx, "GET /x", opts...)
		span.SetAttributes(attrs...)
		span.End()
		n++
	}
	b.StartTimer()
	flush(b, tr)
	b.StopTimer()
	exp.mustHaveExported(b, tr, n)
}

// flush exports every span ended under tr so far, failing b on an error.
func flush(b *testing.B, tr *telemetry.Tracing) {
	if err := tr.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// mustHaveExported fails b unless e got n spans and tr dropped none:
// every request's span was recorded and exported.
func (e *countingExporter) mustHaveExported(b *testing.B, tr *telemetry.Tracing, n int) {
	if got := e.n.Load(); got != int64(n) || tr.Dropped() != 0 {
		b.Fatalf("exporter got %d spans for %d requests, %d dropped", got, n, tr.Dropped())
	}
}
