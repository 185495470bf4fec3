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

// SpanRecord is an ended span as an exporter gets it, read through its
// methods. It is valid only during the SpanExporter.ExportSpans call that
// hands it over: the record goes back to a free list afterwards, so an
// exporter copies what it keeps (Stub copies all of it).
//
// The record is small (120 bytes, two cache lines): what every span has
// is in it; what few spans have (events, links, a trace state, an error's
// description, dropped counts, room for attributes of its own) is in an
// extension, made on the first of the record's spans that needs it and
// reused after that. Records wait in the queue and on the free list as
// live heap, which every collection marks: the smaller and the fewer
// their pointers, the less tracing costs the requests
// (BenchmarkTracingCostPaired, docs/observability.md).
type SpanRecord struct {
	name string
	// attrs are unique by key, the last value set winning.
	attrs    []attribute.KeyValue
	traceID  trace.TraceID
	spanID   trace.SpanID
	parentID trace.SpanID // invalid for a root span
	// start and end are Unix nanoseconds: a time.Time is three words.
	start, end int64
	tracer     *recTracer // the span's scope and resource
	ext        *recordExt // nil until a span of the record needs it
	kind       trace.SpanKind
	status     codes.Code
	flags      trace.TraceFlags
	// parentFlags and parentRemote are the parent's, which shares the
	// span's trace id and trace state.
	parentFlags  trace.TraceFlags
	parentRemote bool
	// shared is true when attrs is a caller's read-only slice
	// (EndWithSharedAttributes), set as the span ended: nothing writes
	// to it, and reset leaves the record's own room alone.
	shared bool
}

// recordExt is what few spans have, kept apart from the record (see
// SpanRecord) and reused by the record's next spans.
type recordExt struct {
	// inline is room for a few attributes: a span that sets attributes of
	// its own (a query's three) needs no slice of its own.
	inline                                         [inlineAttributes]attribute.KeyValue
	traceState                                     trace.TraceState
	events                                         []Event
	links                                          []trace.Link
	statusDescription                              string
	droppedAttributes, droppedEvents, droppedLinks int
}

// Event is a span event.
type Event struct {
	Name       string
	Time       time.Time
	Attributes []attribute.KeyValue
}

// Name is the span's name.
func (r *SpanRecord) Name() string { return r.name }

// SpanContext is the span's context.
func (r *SpanRecord) SpanContext() trace.SpanContext { return r.contextOf(r.spanID, r.flags, false) }

// Parent is the parent's span context; invalid for a root span.
func (r *SpanRecord) Parent() trace.SpanContext {
	if !r.parentID.IsValid() {
		return trace.SpanContext{}
	}
	return r.contextOf(r.parentID, r.parentFlags, r.parentRemote)
}

// contextOf is the context of the span id in the record's trace: the
// span's own or its parent's, which share the trace id and trace state.
func (r *SpanRecord) contextOf(id trace.SpanID, flags trace.TraceFlags, remote bool) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: r.traceID, SpanID: id, TraceFlags: flags, TraceState: r.traceState(), Remote: remote,
	})
}

func (r *SpanRecord) traceState() trace.TraceState {
	if r.ext == nil {
		return trace.TraceState{}
	}
	return r.ext.traceState
}

// Kind is the span's kind (never unspecified: internal then).
func (r *SpanRecord) Kind() trace.SpanKind { return r.kind }

// StartTime is when the span started.
func (r *SpanRecord) StartTime() time.Time { return time.Unix(0, r.start) }

// EndTime is when the span ended.
func (r *SpanRecord) EndTime() time.Time { return time.Unix(0, r.end) }

// Attributes are the span's attributes, unique by key, the last value set
// winning. The exporter must not change them.
func (r *SpanRecord) Attributes() []attribute.KeyValue { return r.attrs }

// Events are the span's events.
func (r *SpanRecord) Events() []Event {
	if r.ext == nil {
		return nil
	}
	return r.ext.events
}

// Links are the span's links.
func (r *SpanRecord) Links() []trace.Link {
	if r.ext == nil {
		return nil
	}
	return r.ext.links
}

// Status is the span's status code and, with codes.Error, its
// description.
func (r *SpanRecord) Status() (codes.Code, string) {
	if r.ext == nil {
		return r.status, ""
	}
	return r.status, r.ext.statusDescription
}

// Dropped counts the attributes, events and links beyond the span's
// limits.
func (r *SpanRecord) Dropped() (attributes, events, links int) {
	if r.ext == nil {
		return 0, 0, 0
	}
	return r.ext.droppedAttributes, r.ext.droppedEvents, r.ext.droppedLinks
}

// Scope is the instrumentation scope of the span's tracer.
func (r *SpanRecord) Scope() *instrumentation.Scope { return &r.tracer.scope }

// Resource is the resource of the span's tracer provider.
func (r *SpanRecord) Resource() *resource.Resource { return r.tracer.p.res }

// reset readies a record for a new span: begin sets the ids, times,
// kind and flags of every span. Of the extension only the attributes in
// use are cleared, not the whole room: zeroing it (and, while the
// collector marks, its write barriers) would cost a span that uses none.
func (r *SpanRecord) reset() {
	if e := r.ext; e != nil {
		if !r.shared {
			clear(e.inline[:min(len(r.attrs), inlineAttributes)])
		}
		e.traceState, e.events, e.links, e.statusDescription = trace.TraceState{}, nil, nil, ""
		e.droppedAttributes, e.droppedEvents, e.droppedLinks = 0, 0, 0
	}
	r.name, r.attrs, r.shared = "", nil, false
	r.tracer, r.status = nil, codes.Unset
}

// extension is the record's extension, made on first use.
func (r *SpanRecord) extension() *recordExt {
	if r.ext == nil {
		r.ext = new(recordExt)
	}
	return r.ext
}

// setAttributes adds attrs, replacing the value of a key already set.
func (r *SpanRecord) setAttributes(attrs []attribute.KeyValue) {
	if r.attrs == nil {
		r.attrs = r.extension().inline[:0:inlineAttributes]
	}
next:
	for _, a := range attrs {
		if !a.Valid() {
			r.extension().droppedAttributes++
			continue
		}
		for i := range r.attrs {
			if r.attrs[i].Key == a.Key {
				r.attrs[i] = a
				continue next
			}
		}
		if len(r.attrs) >= maxAttributes {
			r.extension().droppedAttributes++
			continue
		}
		r.attrs = append(r.attrs, a)
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
// (kind and start win: SpanRoom.Start passes an empty configuration;
// a zero start is now), in into when not nil (a SpanRoom's span, which
// holds a span the sampler drops as well: not recording, with no
// record), else in a new span.
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
	r.name, r.kind, r.tracer = name, kind, t
	if r.kind == trace.SpanKindUnspecified {
		r.kind = trace.SpanKindInternal
	}
	r.traceID, r.spanID, r.flags = sc.TraceID, sc.SpanID, sc.TraceFlags
	r.parentID, r.parentFlags, r.parentRemote = parent.SpanID(), parent.TraceFlags(), parent.IsRemote()
	if sc.TraceState.Len() > 0 {
		r.extension().traceState = sc.TraceState
	}
	if start.IsZero() {
		start = time.Now()
	}
	r.start = start.UnixNano()
	if a := cfg.Attributes(); len(a) > 0 {
		r.setAttributes(a)
	}
	if l := cfg.Links(); len(l) > 0 {
		r.addLinks(l)
	}
	if into == nil {
		into = new(span)
	}
	into.sc, into.tracer, into.rec = trace.NewSpanContext(sc), t, r
	return into
}

// addLinks adds the valid links, up to maxLinks.
func (r *SpanRecord) addLinks(links []trace.Link) {
	for _, l := range links {
		if !l.SpanContext.IsValid() {
			continue
		}
		e := r.extension()
		if len(e.links) >= maxLinks {
			e.droppedLinks++
			continue
		}
		e.links = append(e.links, trace.Link{SpanContext: l.SpanContext, Attributes: append([]attribute.KeyValue(nil), l.Attributes...)})
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

// SetStatus sets the status: Ok is final, Error replaces Unset or Error,
// Unset is ignored (the API's rules).
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	if r == nil || code == codes.Unset || r.status == codes.Ok {
		return
	}
	r.status = code
	if code == codes.Error && description != "" {
		r.extension().statusDescription = description
	} else if r.ext != nil {
		r.ext.statusDescription = ""
	}
}

// SetName renames the span.
func (s *span) SetName(name string) {
	s.mu.Lock()
	if s.rec != nil {
		s.rec.name = name
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
	e := s.rec.extension()
	if len(e.events) >= maxEvents {
		e.droppedEvents++
		return
	}
	// The caller may reuse its slice: the event keeps a copy.
	e.events = append(e.events, Event{Name: name, Time: at, Attributes: append([]attribute.KeyValue(nil), attrs...)})
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
	if end.IsZero() {
		end = time.Now()
	}
	if r := s.take(); r != nil {
		r.end = end.UnixNano()
		s.tracer.p.batch.enqueue(r)
	}
}

// EndWithSharedAttributes sets attrs on sp and ends it d after start, as
// sp.SetAttributes(attrs...) and sp.End(trace.WithTimestamp(start.Add(d)))
// would, for a caller that measured the span's duration already and whose
// attributes are one slice built once and shared by many spans (the HTTP
// observation: a route's, per status). attrs must hold valid, unique keys
// and never change. A span of the recorder takes its lock once, builds no
// end options, and refers to attrs instead of copying them when it has no
// attribute of its own: a copy, with the collector's write barriers while
// it marks, would be most of what a server span's attributes cost.
func EndWithSharedAttributes(sp trace.Span, attrs []attribute.KeyValue, start time.Time, d time.Duration) {
	s, ok := sp.(*span)
	if !ok {
		sp.SetAttributes(attrs...)
		sp.End(trace.WithTimestamp(start.Add(d)))
		return
	}
	r := s.take()
	if r == nil {
		return // ended already, or a span the sampler dropped
	}
	if len(r.attrs) == 0 && len(attrs) <= maxAttributes {
		r.attrs, r.shared = attrs[:len(attrs):len(attrs)], true
	} else {
		r.setAttributes(attrs)
	}
	r.end = start.UnixNano() + int64(d)
	s.tracer.p.batch.enqueue(r)
}

// take ends the span's recording, returning its record (nil when it
// ended already or records nothing): the record is the caller's alone
// after it, and later calls on the span change nothing.
func (s *span) take() *SpanRecord {
	s.mu.Lock()
	r := s.rec
	s.rec = nil
	s.mu.Unlock()
	return r
}
