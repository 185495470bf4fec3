package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Limits of one span, the OpenTelemetry SDK's defaults: what is beyond
// them is dropped and counted in the record.
const (
	maxAttributes = 128
	maxEvents     = 128
	maxLinks      = 128
	// inlineAttributes is how many attributes a record's reused room
	// holds before a span's attributes need a slice of their own: a
	// route's span has four or five, a query's three.
	inlineAttributes = 4
)

// SpanRecord is an ended span as an exporter gets it. It is valid only
// during the SpanExporter.ExportSpans call that hands it over: the record
// goes back to a pool afterwards, so an exporter copies what it keeps.
type SpanRecord struct {
	Name        string
	SpanContext trace.SpanContext
	// Parent is the parent's span context; invalid for a root span.
	Parent    trace.SpanContext
	Kind      trace.SpanKind
	StartTime time.Time
	EndTime   time.Time
	// Attributes are the span's attributes, unique by key, the last value
	// set winning.
	Attributes []attribute.KeyValue
	Events     []Event
	Links      []trace.Link
	// StatusCode and StatusDescription are the span's status (a
	// description only with codes.Error).
	StatusCode                                     codes.Code
	StatusDescription                              string
	DroppedAttributes, DroppedEvents, DroppedLinks int
	Scope                                          *instrumentation.Scope
	Resource                                       *resource.Resource

	// inline is room for a few attributes, reused by the record's next
	// spans; nil until a span sets attributes of its own. Apart, not in
	// the record: a span that refers to shared attributes (a route's
	// server span) needs none, and a record without it is half the size
	// for the collector to mark while the record waits in the queue or
	// on the free list.
	inline *[inlineAttributes]attribute.KeyValue
	// shared is true while Attributes is a caller's read-only slice
	// (SetSharedAttributes): a change copies it first.
	shared bool
}

// Event is a span event.
type Event struct {
	Name       string
	Time       time.Time
	Attributes []attribute.KeyValue
}

// reset readies a record for a new span. Only the inline attributes in
// use hold anything: clearing those and the other fields, not the whole
// record, saves zeroing (and, while the collector marks, write barriers
// over) the unused rest.
func (r *SpanRecord) reset() {
	if !r.shared && r.inline != nil {
		clear(r.inline[:min(len(r.Attributes), inlineAttributes)])
	}
	r.shared = false
	r.Name, r.Attributes, r.Events, r.Links = "", nil, nil, nil
	r.SpanContext, r.Parent = trace.SpanContext{}, trace.SpanContext{}
	r.StatusCode, r.StatusDescription, r.Scope, r.Resource = 0, "", nil, nil
	r.DroppedAttributes, r.DroppedEvents, r.DroppedLinks = 0, 0, 0
}

// room is the record's inline attribute array, empty, made on the
// record's first span that sets attributes of its own.
func (r *SpanRecord) room() []attribute.KeyValue {
	if r.inline == nil {
		r.inline = new([inlineAttributes]attribute.KeyValue)
	}
	return r.inline[:0:inlineAttributes]
}

// setAttributes adds attrs, replacing the value of a key already set.
func (r *SpanRecord) setAttributes(attrs []attribute.KeyValue) {
	if r.shared {
		// The caller's slice is read-only: the record's own copy first.
		r.Attributes, r.shared = append(r.room(), r.Attributes...), false
	} else if r.Attributes == nil {
		r.Attributes = r.room()
	}
next:
	for _, a := range attrs {
		if !a.Valid() {
			r.DroppedAttributes++
			continue
		}
		for i := range r.Attributes {
			if r.Attributes[i].Key == a.Key {
				r.Attributes[i] = a
				continue next
			}
		}
		if len(r.Attributes) >= maxAttributes {
			r.DroppedAttributes++
			continue
		}
		r.Attributes = append(r.Attributes, a)
	}
}

// provider is the recorder's tracer provider: the tracers of a Tracing
// that FromEnv or New built.
type provider struct {
	embedded.TracerProvider
	sampler Sampler
	res     *resource.Resource
	batch   *batcher

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*recTracer
}

// Tracer returns the tracer of the named scope, one per scope.
func (p *provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	s := instrumentation.Scope{Name: name, Version: c.InstrumentationVersion(), SchemaURL: c.SchemaURL()}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tracers[s]
	if !ok {
		t = &recTracer{p: p, scope: s}
		p.tracers[s] = t
	}
	return t
}

// recTracer starts spans of one instrumentation scope.
type recTracer struct {
	embedded.Tracer
	p     *provider
	scope instrumentation.Scope
}

// Start starts a span, the child of the span in ctx unless the options
// ask for a new root. A span the sampler drops is the API's non-recording
// span carrying the new span context, so the trace still propagates.
func (t *recTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	s := t.start(ctx, name, opts)
	return trace.ContextWithSpan(ctx, s), s
}

// start starts a span, the child of the span in ctx, without deriving a
// context carrying it.
func (t *recTracer) start(ctx context.Context, name string, opts []trace.SpanStartOption) trace.Span {
	cfg := trace.NewSpanStartConfig(opts...)
	return t.begin(ctx, name, &cfg, cfg.SpanKind(), cfg.Timestamp(), nil)
}

// begin starts a span from its start configuration, kind and start time
// (kind and start win: SpanSlot.Start passes an empty configuration;
// a zero start is now), in into when not nil (a SpanSlot's room for its
// span, which holds a span the sampler drops as well: not recording,
// with no record), else in a new span.
func (t *recTracer) begin(ctx context.Context, name string, cfg *trace.SpanConfig, kind trace.SpanKind, start time.Time, into *span) trace.Span {
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	sc := trace.SpanContextConfig{SpanID: newSpanID()}
	if parent.IsValid() {
		sc.TraceID = parent.TraceID()
		sc.TraceState = parent.TraceState()
	} else {
		sc.TraceID = newTraceID()
	}
	if !t.p.sampler.sample(parent, sc.TraceID) {
		if into != nil {
			// Without a record, the slot's span records nothing and
			// carries the context on, with no allocation.
			into.sc, into.tracer = trace.NewSpanContext(sc), t
			return into
		}
		// The API's non-recording span: it carries the context on.
		return trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(sc)))
	}
	sc.TraceFlags = trace.FlagsSampled
	r := t.p.batch.record()
	r.Name, r.Kind, r.Parent = name, kind, parent
	if r.Kind == trace.SpanKindUnspecified {
		r.Kind = trace.SpanKindInternal
	}
	r.SpanContext = trace.NewSpanContext(sc)
	r.Scope, r.Resource = &t.scope, t.p.res
	r.StartTime = start
	if r.StartTime.IsZero() {
		r.StartTime = time.Now()
	}
	if a := cfg.Attributes(); len(a) > 0 {
		r.setAttributes(a)
	}
	if l := cfg.Links(); len(l) > 0 {
		r.addLinks(l)
	}
	if into == nil {
		into = new(span)
	}
	into.sc, into.tracer, into.rec = r.SpanContext, t, r
	return into
}

// addLinks adds the valid links, up to maxLinks.
func (r *SpanRecord) addLinks(links []trace.Link) {
	for _, l := range links {
		if !l.SpanContext.IsValid() {
			continue
		}
		if len(r.Links) >= maxLinks {
			r.DroppedLinks++
			continue
		}
		r.Links = append(r.Links, trace.Link{SpanContext: l.SpanContext, Attributes: append([]attribute.KeyValue(nil), l.Attributes...)})
	}
}

// newTraceID is a random, non-zero trace id. math/rand/v2's top-level
// functions use the runtime's per-thread ChaCha8 source: no lock.
func newTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID is a random, non-zero span id.
func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// span is what Start returns: the span's context, and its record until
// End hands the record to the batcher. It is not pooled, so a caller that
// keeps a span after End (for its SpanContext, or a late SetAttributes)
// reads its own context and writes nothing: the record, pooled, is only
// reachable from here until End.
type span struct {
	embedded.Span
	sc     trace.SpanContext
	tracer *recTracer

	mu  sync.Mutex
	rec *SpanRecord // nil once ended
}

// SpanContext is the span's context, valid after End too.
func (s *span) SpanContext() trace.SpanContext { return s.sc }

// IsRecording is true until End.
func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec != nil
}

// SetAttributes sets attributes, replacing the values of keys already set.
func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	if s.rec != nil {
		s.rec.setAttributes(kv)
	}
	s.mu.Unlock()
}

// SetSharedAttributes sets attrs on sp as sp.SetAttributes does, for a
// slice whose keys are valid and unique and that its caller never
// changes (built once and shared by many spans, as a route's span
// attributes are). A span of the recorder with no attribute yet refers to
// attrs instead of copying them: the copy, with the collector's write
// barriers while it marks, was the most of a server span's attribute
// cost.
func SetSharedAttributes(sp trace.Span, attrs []attribute.KeyValue) {
	s, ok := sp.(*span)
	if !ok {
		sp.SetAttributes(attrs...)
		return
	}
	s.mu.Lock()
	if r := s.rec; r != nil {
		if len(r.Attributes) == 0 && len(attrs) <= maxAttributes {
			r.Attributes, r.shared = attrs[:len(attrs):len(attrs)], true
		} else {
			r.setAttributes(attrs)
		}
	}
	s.mu.Unlock()
}

// SetStatus sets the status: Ok is final, Error replaces Unset or Error,
// Unset is ignored (the API's rules).
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec == nil || code == codes.Unset || s.rec.StatusCode == codes.Ok {
		return
	}
	s.rec.StatusCode = code
	s.rec.StatusDescription = ""
	if code == codes.Error {
		s.rec.StatusDescription = description
	}
}

// SetName renames the span.
func (s *span) SetName(name string) {
	s.mu.Lock()
	if s.rec != nil {
		s.rec.Name = name
	}
	s.mu.Unlock()
}

// AddEvent adds an event, timed now unless the options give a time.
func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	s.addEvent(name, c.Timestamp(), c.Attributes())
}

func (s *span) addEvent(name string, at time.Time, attrs []attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec == nil {
		return
	}
	if len(s.rec.Events) >= maxEvents {
		s.rec.DroppedEvents++
		return
	}
	// The caller may reuse its slice: the event keeps a copy.
	s.rec.Events = append(s.rec.Events, Event{Name: name, Time: at, Attributes: append([]attribute.KeyValue(nil), attrs...)})
}

// AddLink adds a link to another span.
func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	if s.rec != nil {
		s.rec.addLinks([]trace.Link{l})
	}
	s.mu.Unlock()
}

// RecordError adds an "exception" event for err, as the SDK does.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || !s.IsRecording() {
		return
	}
	c := trace.NewEventConfig(opts...)
	attrs := append([]attribute.KeyValue{
		attribute.String("exception.type", errorType(err)), attribute.String("exception.message", err.Error()),
	}, c.Attributes()...)
	s.addEvent("exception", c.Timestamp(), attrs)
}

// errorType is err's dynamic type, package path and name, as the SDK
// writes exception.type.
func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer or another unnamed type
	}
	return t.PkgPath() + "." + t.Name()
}

// TracerProvider is the provider of the span's tracer.
func (s *span) TracerProvider() trace.TracerProvider { return s.tracer.p }

// End stamps the end time and hands the record to the batcher; later
// calls on the span do nothing.
func (s *span) End(opts ...trace.SpanEndOption) {
	var end time.Time
	if len(opts) > 0 {
		c := trace.NewSpanEndConfig(opts...)
		end = c.Timestamp()
	}
	s.end(end)
}

// EndAt ends span at end (now when zero), as span.End with
// trace.WithTimestamp would, without building the end options: for a
// caller that read the clock at the span's end already (the HTTP
// observation, for its duration metric).
func EndAt(sp trace.Span, end time.Time) {
	if s, ok := sp.(*span); ok {
		s.end(end)
		return
	}
	sp.End(trace.WithTimestamp(end)) // zero: no timestamp, the span reads its clock
}

// end stamps end (now when zero) and hands the record to the batcher;
// later calls do nothing.
func (s *span) end(end time.Time) {
	if end.IsZero() {
		end = time.Now()
	}
	s.mu.Lock()
	r := s.rec
	s.rec = nil
	s.mu.Unlock()
	if r == nil {
		return
	}
	r.EndTime = end
	s.tracer.p.batch.enqueue(r)
}
