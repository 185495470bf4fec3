package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SpanSlot is a request's context with room for the request's server
// span, set after the context was made. A server that already gives each
// request a context of its own (its deadline) makes that context a slot
// when tracing is on; the per-route observation then puts the server span
// in the slot instead of deriving a context and copying the
// *http.Request to carry it (a 256-byte copy per traced request).
//
// trace.SpanFromContext on the slot, or on any context derived from it,
// finds the span once set. The slot is written only by the request's own
// goroutine, before the handler runs or starts goroutines of its own.
type SpanSlot struct {
	context.Context
	// own is the slot's span once the recorder started one in it (its
	// tracer set), sampled or not: the request's context and its server
	// span are one allocation. Like every span of the recorder it is
	// never reused, so holding it after End is safe. A span of another
	// tracer goes in the context instead: no field for it keeps the
	// slot in a smaller size class.
	own span
}

// NewSpanSlot is an empty slot over parent.
func NewSpanSlot(parent context.Context) *SpanSlot { return &SpanSlot{Context: parent} }

// SlotOf is ctx as a slot, or nil when ctx is not one (a context derived
// from a slot is not a slot: only the request's own context is filled).
func SlotOf(ctx context.Context) *SpanSlot {
	s, _ := ctx.(*SpanSlot)
	return s
}

// Extract puts what prop extracts from carrier (a caller's trace
// context, baggage) under the slot, so the span started next continues
// the caller's trace.
func (s *SpanSlot) Extract(prop propagation.TextMapPropagator, carrier propagation.TextMapCarrier) {
	s.Context = prop.Extract(s.Context, carrier)
}

// Start starts a span of kind with tracer as a child of the slot's
// context, begun at start (now when zero: a caller that read the clock
// already passes its reading), and puts it in the slot. The recorder's
// tracer starts it in the slot's own room, a span the sampler drops
// included, without deriving a context or building a start
// configuration from options; any other tracer's context becomes the
// slot's.
func (s *SpanSlot) Start(tracer trace.Tracer, name string, kind trace.SpanKind, start time.Time) trace.Span {
	if t, ok := tracer.(*recTracer); ok {
		var cfg trace.SpanConfig
		return t.begin(s.Context, name, &cfg, kind, start, &s.own)
	}
	// A zero timestamp is no timestamp to the API: the tracer reads its
	// own clock.
	var sp trace.Span
	s.Context, sp = tracer.Start(s.Context, name, trace.WithSpanKind(kind), trace.WithTimestamp(start))
	return sp
}

// Value answers the API's current-span key with the slot's span once
// the recorder started one, and anything else from the context under the
// slot.
func (s *SpanSlot) Value(key any) any {
	if key == spanKey && s.own.tracer != nil {
		return &s.own
	}
	return s.Context.Value(key)
}

// spanKey is the key under which the trace API keeps a context's span. It
// is unexported there; trace.SpanFromContext asks a context for it, so a
// context that records the key it is asked for learns it (TestSpanSlot
// fails if the API stops looking spans up this way).
var spanKey = func() any {
	var k keyCatcher
	trace.SpanFromContext(&k)
	return k.key
}()

// keyCatcher records the key Value is called with.
type keyCatcher struct {
	context.Context
	key any
}

func (k *keyCatcher) Value(key any) any {
	k.key = key
	return nil
}
