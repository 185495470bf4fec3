package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// SpanRoom is room for one span in a value made anyway: a request's own
// context (reqctx.Context), where the HTTP observation starts the
// request's server span. The recorder starts its span in the room, the
// request's context and its server span being one allocation, instead of
// allocating the span and deriving a context to carry it, which would
// also copy the *http.Request (256 bytes per traced request).
//
// The room is written only by the request's own goroutine, before the
// handler runs or starts goroutines of its own.
type SpanRoom struct {
	// own is the room's span once the recorder started one in it (its
	// tracer set), sampled or not. Like every span of the recorder it is
	// never reused, so holding it after End is safe.
	own span
}

// Start starts a span of kind with tracer as a child of parent, begun at
// start (now when zero: a caller that read the clock already passes its
// reading). The recorder's tracer starts it in the room, a span the
// sampler drops included, without building a start configuration from
// options, and returns parent itself. Any other tracer's span is returned
// with the context carrying it, which the caller takes as its context
// from then on.
func (r *SpanRoom) Start(parent context.Context, tracer trace.Tracer, name string, kind trace.SpanKind, start time.Time) (context.Context, trace.Span) {
	if t, ok := tracer.(*recTracer); ok {
		var cfg trace.SpanConfig
		return parent, t.begin(parent, name, &cfg, kind, start, &r.own)
	}
	// A zero timestamp is no timestamp to the API: the tracer reads its
	// own clock.
	return tracer.Start(parent, name, trace.WithSpanKind(kind), trace.WithTimestamp(start))
}

// Value is what a context holding the room answers for key: the room's
// span and true when key is the trace API's span key and the recorder
// started a span in the room, otherwise false, and the context asks the
// context under it.
func (r *SpanRoom) Value(key any) (any, bool) {
	if key == spanKey && r.own.tracer != nil {
		return &r.own, true
	}
	return nil, false
}

// spanKey is the key under which the trace API keeps a context's span. It
// is unexported there; trace.SpanFromContext asks a context for it, so a
// context that records the key it is asked for learns it (the reqctx
// tests fail if the API stops looking spans up this way).
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
