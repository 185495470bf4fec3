package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cellgate/cellgate/internal/telemetry"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnvOffWhenUnset(t *testing.T) {
	for _, m := range []map[string]string{{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}} {
		tr, err := telemetry.FromEnv(context.Background(), env(m), io.Discard, "svc")
		if err != nil {
			t.Fatal(err)
		}
		if tr.Enabled || tr.Tracer("x") != nil {
			t.Fatalf("%v: tracing on", m)
		}
	}
}

func TestFromEnvErrorsNameTheVariable(t *testing.T) {
	for want, m := range map[string]map[string]string{
		"OTEL_TRACES_EXPORTER":        {"OTEL_TRACES_EXPORTER": "jaeger"},
		"OTEL_EXPORTER_OTLP_PROTOCOL": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		"OTEL_TRACES_SAMPLER_ARG":     {"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
		"OTEL_TRACES_SAMPLER":         {"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "sometimes"},
		"OTEL_EXPORTER_OTLP_HEADERS":  {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
		"OTEL_EXPORTER_OTLP_ENDPOINT": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
	} {
		_, err := telemetry.FromEnv(context.Background(), env(m), io.Discard, "svc")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one naming %s", m, err, want)
		}
	}
}

// TestOTLPExport sends a span with a parent, an event, a link and an error
// status to an OTLP/HTTP receiver and decodes what arrived with the
// collector's own message type.
func TestOTLPExport(t *testing.T) {
	got := make(chan *coltracepb.ExportTraceServiceRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("X-Key") != "a b" {
			t.Errorf("request %s %v", r.URL.Path, r.Header)
		}
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Error(err)
		}
		got <- &req
	}))
	defer srv.Close()
	tr, err := telemetry.FromEnv(context.Background(), env(map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS": "X-Key=a%20b", "OTEL_SERVICE_NAME": "cell-a",
	}), io.Discard, "svc")
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tr.Tracer("t").Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
	_, child := tr.Tracer("t").Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: parent.SpanContext()}),
		trace.WithAttributes(attribute.String("k", "v"), attribute.Int64Slice("n", []int64{1, 2})))
	child.AddEvent("refused", trace.WithAttributes(attribute.String("reason", "full")))
	child.SetStatus(codes.Error, "boom")
	child.End()
	parent.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := <-got
	rs := req.ResourceSpans
	if len(rs) != 1 || len(rs[0].ScopeSpans) != 1 || len(rs[0].ScopeSpans[0].Spans) != 2 {
		t.Fatalf("got %v", req)
	}
	var svc string
	for _, kv := range rs[0].Resource.Attributes {
		if kv.Key == "service.name" {
			svc = kv.Value.GetStringValue()
		}
	}
	if svc != "cell-a" {
		t.Errorf("service.name %q", svc)
	}
	c, p := rs[0].ScopeSpans[0].Spans[0], rs[0].ScopeSpans[0].Spans[1]
	if c.Name != "child" || p.Name != "parent" || !bytes.Equal(c.TraceId, p.TraceId) || !bytes.Equal(c.ParentSpanId, p.SpanId) {
		t.Errorf("parentage: %v / %v", c, p)
	}
	if len(c.Links) != 1 || !bytes.Equal(c.Links[0].SpanId, p.SpanId) || len(c.Events) != 1 || c.Events[0].Name != "refused" ||
		c.Status.GetMessage() != "boom" || c.Attributes[0].Value.GetStringValue() != "v" ||
		len(c.Attributes[1].Value.GetArrayValue().GetValues()) != 2 || p.Kind.String() != "SPAN_KIND_SERVER" {
		t.Errorf("child %v", c)
	}
}

func TestLogHandlerAddsTraceID(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(telemetry.LogHandler{slog.NewJSONHandler(&b, nil)}).With("a", 1)
	tr := telemetry.New(telemetry.Config{})
	ctx, span := tr.Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var in, out map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &in)
	_ = json.Unmarshal([]byte(lines[1]), &out)
	if in["trace_id"] != span.SpanContext().TraceID().String() || in["a"] != 1.0 {
		t.Errorf("inside: %v", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("outside: %v", out)
	}
}

func TestLimiter(t *testing.T) {
	l := telemetry.NewLimiter(time.Second, 2)
	t0 := time.Unix(0, 0)
	for i, want := range []bool{true, true, false, false} {
		if ok, _ := l.AllowAt("k", t0); ok != want {
			t.Fatalf("line %d: %v", i, ok)
		}
	}
	if ok, _ := l.AllowAt("other", t0); !ok {
		t.Fatal("keys share a budget")
	}
	ok, n := l.AllowAt("k", t0.Add(time.Second))
	if !ok || n != 2 {
		t.Fatalf("after the interval: %v, %d held back", ok, n)
	}
}

func TestParseLevel(t *testing.T) {
	if l, err := telemetry.ParseLevel("X", "DEBUG"); err != nil || l != slog.LevelDebug {
		t.Fatal(l, err)
	}
	if _, err := telemetry.ParseLevel("CELLGATE_LOG_LEVEL", "loud"); err == nil || !strings.Contains(err.Error(), "CELLGATE_LOG_LEVEL") {
		t.Fatal(err)
	}
}

// TestTraceTenantFromEnv: unset is off, a boolean is read, anything else
// is an error naming the variable.
func TestTraceTenantFromEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "0": false} {
		got, err := telemetry.TraceTenantFromEnv(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	if _, err := telemetry.TraceTenantFromEnv(func(string) string { return "yes please" }); err == nil || !strings.Contains(err.Error(), "CELLGATE_TRACE_TENANT") {
		t.Errorf("a bad value: %v", err)
	}
}
