package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/telemetry"
)

// TestServerSpanAccessLogAndLogger: a tenant route's request has a server
// span continuing the caller's traceparent (route, status, opt-in tenant);
// the handler's runtime.Logger lines and the access-log line carry the
// request id, trace id and tenant; a refusal is a span event and a
// rate-limited log line.
func TestServerSpanAccessLogAndLogger(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	cfg := testConfig()
	cfg.Server.Cell = "cell-a"
	s, err := New(cfg, Options{Logger: log, Registry: newRegistry(), Getenv: func(string) string { return "" },
		Tracing: telemetry.New(telemetry.Config{Sync: true}, telemetry.SDKExporter(exp)), TraceTenant: true, AccessLog: &AccessLog{Level: slog.LevelInfo}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.bulk.close()
	s.Tenant("GET", "/things/:id", func(c echo.Context, _ shards.Accessor) error {
		Logger(c).Info("inside")
		return c.String(http.StatusOK, "ok")
	})
	s.Tenant("GET", "/refused", func(echo.Context, shards.Accessor) error { return shards.ErrShardUnavailable })

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := httptest.NewRequest("GET", "/things/7", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	req.Header.Set("traceparent", parent)
	w := httptest.NewRecorder()
	s.Echo().ServeHTTP(w, req)
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sp := spans[0]
	if sp.Name() != "GET /things/:id" || sp.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		sp.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("span %s in %v, parent %v", sp.Name(), sp.SpanContext(), sp.Parent())
	}
	want := map[string]string{"http.route": "/things/:id", "cellgate.tenant": "acme", "cellgate.cell": "cell-a", "http.response.status_code": "200"}
	for _, kv := range sp.Attributes() {
		if v, ok := want[string(kv.Key)]; ok && kv.Value.String() == v {
			delete(want, string(kv.Key))
		}
	}
	if len(want) > 0 {
		t.Errorf("span lacks %v: %v", want, sp.Attributes())
	}
	id := w.Header().Get("X-Request-ID")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines:\n%s", logs.String())
	}
	for i, msg := range []string{"inside", "request"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] != msg || m["request_id"] != id || m["trace_id"] != "0af7651916cd43dd8448eb211c80319c" || m["tenant"] != "acme" || m["cell"] != "cell-a" {
			t.Errorf("line %d: %v", i, m)
		}
		if msg == "request" && (m["status"] != 200.0 || m["route"] != "/things/:id" || m["method"] != "GET" || m["bytes"] != 2.0) {
			t.Errorf("access line: %v", m)
		}
	}

	exp.Reset()
	logs.Reset()
	for range refusalLines + 3 {
		req = httptest.NewRequest("GET", "/refused", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		s.Echo().ServeHTTP(httptest.NewRecorder(), req)
	}
	sp = exp.GetSpans().Snapshots()[0]
	if ev := sp.Events(); len(ev) != 1 || ev[0].Name != "refused" || ev[0].Attributes[0].Value.AsString() != "shard_unavailable" {
		t.Errorf("refusal events %v", sp.Events())
	}
	if n := strings.Count(logs.String(), `"msg":"request refused"`); n != refusalLines {
		t.Errorf("%d refusal lines for %d refusals, want %d", n, refusalLines+3, refusalLines)
	}
}

// TestExemplarOncePerBucketPerInterval: a sampled request's trace id
// becomes its duration bucket's exemplar at most once per exemplarEvery;
// another bucket has its own clock, and after the interval the bucket
// takes the next request's id.
func TestExemplarOncePerBucketPerInterval(t *testing.T) {
	m, err := newHTTPMetrics(newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{metrics: m}
	r := o.newRoute("GET", "/x")
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	span := func() trace.Span {
		_, s := tp.Tracer("t").Start(context.Background(), "x")
		return s
	}
	exemplars := func() map[float64]string {
		var pb dto.Metric
		if err := r.obs.(prometheus.Metric).Write(&pb); err != nil {
			t.Fatal(err)
		}
		got := map[float64]string{}
		for _, b := range pb.GetHistogram().GetBucket() {
			if e := b.GetExemplar(); e != nil {
				got[b.GetUpperBound()] = e.GetLabel()[0].GetValue()
			}
		}
		return got
	}
	t0 := time.Unix(1_000, 0)
	first, second, slow, later := span(), span(), span(), span()
	r.observe(first, t0, 500*time.Microsecond)
	r.observe(second, t0.Add(time.Millisecond), 500*time.Microsecond)
	r.observe(slow, t0.Add(time.Millisecond), 2*time.Second)
	got := exemplars()
	if got[.001] != first.SpanContext().TraceID().String() || got[2.5] != slow.SpanContext().TraceID().String() || len(got) != 2 {
		t.Fatalf("exemplars %v, want the first request's in 0.001 and the slow one's in 2.5", got)
	}
	r.observe(later, t0.Add(exemplarEvery), 500*time.Microsecond)
	if got := exemplars(); got[.001] != later.SpanContext().TraceID().String() {
		t.Fatalf("after %s the bucket kept %s", exemplarEvery, got[.001])
	}
	r.observe(nil, t0.Add(3*exemplarEvery), 500*time.Microsecond) // tracing off: no exemplar, still counted
	var pb dto.Metric
	_ = r.obs.(prometheus.Metric).Write(&pb)
	if n := pb.GetHistogram().GetSampleCount(); n != 5 {
		t.Fatalf("%d observations, want 5", n)
	}
}
