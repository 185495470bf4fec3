package telemetry

import (
	"context"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// SDKExporter adapts an OpenTelemetry SDK exporter (the console's
// stdouttrace, tracetest's in-memory exporter) to the recorder: each
// batch is copied into the SDK's read-only spans, in the batcher's
// goroutine, off the request path.
func SDKExporter(e sdktrace.SpanExporter) SpanExporter { return sdkExporter{e} }

type sdkExporter struct{ e sdktrace.SpanExporter }

func (s sdkExporter) ExportSpans(ctx context.Context, spans []*SpanRecord) error {
	ro := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, r := range spans {
		ro[i] = r.Stub().Snapshot()
	}
	return s.e.ExportSpans(ctx, ro)
}

func (s sdkExporter) Shutdown(ctx context.Context) error { return s.e.Shutdown(ctx) }

// Stub copies the record into the SDK's test form, which outlives the
// record (what an exporter keeping spans stores).
func (r *SpanRecord) Stub() tracetest.SpanStub {
	code, description := r.Status()
	st := tracetest.SpanStub{
		Name: r.name, SpanContext: r.SpanContext(), Parent: r.Parent(), SpanKind: r.kind,
		StartTime: r.StartTime(), EndTime: r.EndTime(), Attributes: slices.Clone(r.attrs),
		Status:   sdktrace.Status{Code: code, Description: description},
		Resource: r.Resource(), InstrumentationScope: *r.Scope(),
	}
	st.DroppedAttributes, st.DroppedEvents, st.DroppedLinks = r.Dropped()
	for _, e := range r.Events() {
		st.Events = append(st.Events, sdktrace.Event{Name: e.Name, Time: e.Time, Attributes: slices.Clone(e.Attributes)})
	}
	for _, l := range r.Links() {
		st.Links = append(st.Links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: slices.Clone(l.Attributes)})
	}
	return st
}
