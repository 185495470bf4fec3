package reqctx

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenant"
)

type parentKey struct{}

// TestContext: a request's own context keeps its parent's deadline and
// values, is found by Of (a context derived from it is not), and answers
// the tenant and the span set in its room, as do the contexts derived
// from it, both at once.
func TestContext(t *testing.T) {
	deadline := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), parentKey{}, "p"), deadline)
	defer cancel()
	c := New(parent)
	derived, cancelDerived := context.WithCancel(c)
	defer cancelDerived()
	if Of(c) != c || Of(derived) != nil || Of(parent) != nil {
		t.Fatal("Of finds a context other than the request's own")
	}
	if d, ok := c.Deadline(); !ok || !d.Equal(deadline) || c.Value(parentKey{}) != "p" {
		t.Fatalf("the parent's deadline %v, %v and value %v are lost", d, ok, c.Value(parentKey{}))
	}
	if _, ok := tenant.From(c); ok {
		t.Fatal("an empty room has a tenant")
	}
	if trace.SpanFromContext(c).SpanContext().IsValid() {
		t.Fatal("an empty room has a span")
	}

	c.SetTenant(strings.Clone("acme"))
	tr := telemetry.New(telemetry.Config{}, discard{})
	defer func() { _ = tr.Shutdown(context.Background()) }()
	c.Extract(tr.Propagator, propagation.MapCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	s := c.StartSpan(tr.Tracer("t"), "GET /x", trace.SpanKindServer, time.Time{})
	defer s.End()
	for name, ctx := range map[string]context.Context{"own": c, "derived": derived} {
		if id, ok := tenant.From(ctx); !ok || id != "acme" {
			t.Errorf("%s: tenant %q, %v; want acme", name, id, ok)
		}
		if trace.SpanFromContext(ctx) != s {
			t.Errorf("%s: the API does not find the request's span", name)
		}
		if ctx.Value(parentKey{}) != "p" {
			t.Errorf("%s: the parent's value is lost", name)
		}
	}
	if got := s.SpanContext().TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("trace %s: the extracted caller's trace was not continued", got)
	}
	if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
		t.Error("extracting the caller's trace lost the deadline")
	}
}

// TestContextAllocations: filling the room allocates only the tenant id
// boxed for Value, and a span the sampler drops nothing: no context is
// derived and no span allocated.
func TestContextAllocations(t *testing.T) {
	off := telemetry.ParentBased(telemetry.AlwaysOff())
	tr := telemetry.New(telemetry.Config{Sampler: &off}, discard{})
	defer func() { _ = tr.Shutdown(context.Background()) }()
	tracer := tr.Tracer("t")
	c := New(context.Background())
	id := strings.Clone("acme")
	if n := testing.AllocsPerRun(100, func() {
		c.SetTenant(id)
		c.StartSpan(tracer, "GET /x", trace.SpanKindServer, time.Time{})
	}); n != 1 {
		t.Errorf("filling the room allocates %v times, want 1 (the boxed id)", n)
	}
}

// discard is an exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []*telemetry.SpanRecord) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
