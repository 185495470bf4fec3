package router

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cellgate/cellgate/internal/telemetry"
)

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestRouterSpan: a forwarded request has one server span naming cell and
// slot (the tenant only when asked), continuing the client's trace, and
// the cell receives the span's own traceparent; a refusal's span has an
// event naming its code.
func TestRouterSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	f := newFixture(t, ProxyConfig{Tracing: telemetry.New(telemetry.Config{Sync: true}, telemetry.SDKExporter(exp)), TraceTenant: true})
	var got string
	f.cells[0].extra = func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get("traceparent") }
	const clientTrace = "0af7651916cd43dd8448eb211c80319c"
	resp, _ := f.get(t, "/x/a", tenant1, "traceparent", "00-"+clientTrace+"-b7ad6b7169203331-01")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.SpanContext().TraceID().String() != clientTrace || s.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("span does not continue the client's trace: %v parent %v", s.SpanContext(), s.Parent())
	}
	if want := "00-" + clientTrace + "-" + s.SpanContext().SpanID().String() + "-01"; got != want {
		t.Errorf("cell got traceparent %q, want %q", got, want)
	}
	for key, want := range map[string]string{"cellgate.cell": "cell-1", "cellgate.tenant": tenant1} {
		if v, _ := attr(s, key); v.AsString() != want {
			t.Errorf("%s = %q, want %q", key, v.AsString(), want)
		}
	}
	if v, ok := attr(s, "cellgate.slot"); !ok || v.AsInt64() < 0 || v.AsInt64() > 8191 {
		t.Errorf("cellgate.slot %v", v)
	}
	if v, _ := attr(s, "http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("status %v", v)
	}

	f.cells[1].srv.Close() // the first request notices; the second is refused
	f.get(t, "/x/a", tenant2)
	exp.Reset()
	resp, _ = f.get(t, "/x/a", tenant2)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The first request's span may end after its answer was read: the
	// refused request's span is the last.
	spans = exp.GetSpans().Snapshots()
	last := spans[len(spans)-1]
	if len(last.Events()) != 1 || last.Events()[0].Name != "refused" {
		t.Fatalf("refused span: %v", last)
	}
	if v, _ := attr(last, "cellgate.refusal.code"); v.AsString() != "cell_unavailable" {
		t.Errorf("refusal code %q", v.AsString())
	}
}

// TestRouterClientGoneIs499: a client that leaves before the cell answers
// is counted under 499, never 5xx.
func TestRouterClientGoneIs499(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	release := make(chan struct{})
	f.cells[0].extra = func(w http.ResponseWriter, r *http.Request) { <-release }
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.router.URL+"/x/slow", nil)
	req.Header.Set("X-Tenant-ID", tenant1)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request was answered")
	}
	waitFor(t, 5*time.Second, func() bool {
		return counterOf(t, f, "499") == 1
	})
	if n := counterOf(t, f, "5xx"); n != 0 {
		t.Fatalf("5xx = %v", n)
	}
}

// counterOf reads cellgate_router_requests_total of cell-1 for a class.
func counterOf(t *testing.T, f *fixture, class string) float64 {
	{
		mfs, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "cellgate_router_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				var cell, code string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "cell":
						cell = l.GetValue()
					case "code_class":
						code = l.GetValue()
					}
				}
				if cell == "cell-1" && code == class {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
}
