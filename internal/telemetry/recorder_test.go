package telemetry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// memExporter keeps copies of every span it gets.
type memExporter struct {
	mu    sync.Mutex
	spans []tracetest.SpanStub
	block chan struct{} // when set, ExportSpans waits for it
}

func (e *memExporter) ExportSpans(_ context.Context, spans []*SpanRecord) error {
	if e.block != nil {
		<-e.block
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range spans {
		e.spans = append(e.spans, r.Stub())
	}
	return nil
}

func (e *memExporter) Shutdown(context.Context) error { return nil }

func (e *memExporter) byName(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %q", name)
	return tracetest.SpanStub{}
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestRecorderSpans: parentage, kinds, links, events, status rules, and
// attributes beyond the inline capacity with the last value of a key
// winning.
func TestRecorderSpans(t *testing.T) {
	exp := &memExporter{}
	tr := New(Config{}, exp)
	tracer := tr.Tracer("t")
	ctx, parent := tracer.Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
	_, child := tracer.Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: parent.SpanContext(),
		Attributes: []attribute.KeyValue{attribute.String("l", "x")}}))
	for i := range inlineAttributes + 3 {
		child.SetAttributes(attribute.Int(fmt.Sprintf("k%d", i), i))
	}
	child.SetAttributes(attribute.Int("k0", 100), attribute.String("", "invalid"))
	child.AddEvent("refused", trace.WithAttributes(attribute.String("code", "full")))
	child.RecordError(errors.New("boom"))
	child.SetStatus(codes.Error, "boom")
	child.SetStatus(codes.Unset, "")
	child.End()
	child.SetAttributes(attribute.Int("late", 1)) // after End: ignored
	child.End()                                   // twice: once exported
	parent.SetStatus(codes.Ok, "")
	parent.SetStatus(codes.Error, "after ok") // Ok is final
	parent.End()
	if child.IsRecording() || !child.SpanContext().IsValid() {
		t.Error("an ended span records, or lost its context")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(exp.spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(exp.spans))
	}
	p, c := exp.byName(t, "parent"), exp.byName(t, "child")
	if p.Parent.IsValid() || p.SpanKind != trace.SpanKindServer || p.Status.Code != codes.Ok || p.Status.Description != "" {
		t.Errorf("parent %+v", p)
	}
	if c.Parent.SpanID() != p.SpanContext.SpanID() || c.SpanContext.TraceID() != p.SpanContext.TraceID() ||
		c.SpanKind != trace.SpanKindInternal || !c.SpanContext.IsSampled() {
		t.Errorf("child's parentage: %+v", c)
	}
	if len(c.Attributes) != inlineAttributes+3 || c.DroppedAttributes != 1 {
		t.Errorf("child attributes %v, %d dropped", c.Attributes, c.DroppedAttributes)
	}
	if v, _ := attrOf(c, "k0"); v.AsInt64() != 100 {
		t.Errorf("k0 = %v, want the last value", v)
	}
	if _, ok := attrOf(c, "late"); ok {
		t.Error("an attribute set after End was kept")
	}
	if len(c.Links) != 1 || c.Links[0].SpanContext.SpanID() != p.SpanContext.SpanID() || len(c.Links[0].Attributes) != 1 {
		t.Errorf("links %v", c.Links)
	}
	if len(c.Events) != 2 || c.Events[0].Name != "refused" || c.Events[1].Name != "exception" || c.Events[0].Time.IsZero() {
		t.Errorf("events %v", c.Events)
	}
	if c.Status.Code != codes.Error || c.Status.Description != "boom" {
		t.Errorf("status %v %q", c.Status.Code, c.Status.Description)
	}
	if c.StartTime.IsZero() || c.EndTime.Before(c.StartTime) {
		t.Errorf("times %v .. %v", c.StartTime, c.EndTime)
	}
}

// TestRecorderIDsUnique: trace and span ids from concurrent roots never
// repeat.
func TestRecorderIDsUnique(t *testing.T) {
	tr := New(Config{Sampler: ptr(AlwaysOff())})
	tracer := tr.Tracer("t")
	var mu sync.Mutex
	traces, spans := map[trace.TraceID]bool{}, map[trace.SpanID]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				_, s := tracer.Start(context.Background(), "s")
				sc := s.SpanContext()
				mu.Lock()
				if traces[sc.TraceID()] || spans[sc.SpanID()] || !sc.IsValid() {
					t.Errorf("id repeated or invalid: %v", sc)
				}
				traces[sc.TraceID()], spans[sc.SpanID()] = true, true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func ptr[T any](v T) *T { return &v }

// TestSamplers: the root decision, the ratio by trace id, and
// parent-based following local and remote parents either way.
func TestSamplers(t *testing.T) {
	remote := func(sampled bool) trace.SpanContext {
		c := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}
		if sampled {
			c.TraceFlags = trace.FlagsSampled
		}
		return trace.NewSpanContext(c)
	}
	var none trace.SpanContext
	low, high := trace.TraceID{15: 1}, trace.TraceID{8: 0xff, 15: 0xff}
	for _, tc := range []struct {
		name   string
		s      Sampler
		parent trace.SpanContext
		id     trace.TraceID
		want   bool
	}{
		{"always_on", AlwaysOn(), remote(false), low, true},
		{"always_off", AlwaysOff(), remote(true), low, false},
		{"ratio low id", TraceIDRatio(0.5), none, low, true},
		{"ratio high id", TraceIDRatio(0.5), none, high, false},
		{"ratio 1", TraceIDRatio(1), none, high, true},
		{"ratio 0", TraceIDRatio(0), none, low, false},
		{"parentbased sampled remote", ParentBased(AlwaysOff()), remote(true), low, true},
		{"parentbased unsampled remote", ParentBased(AlwaysOn()), remote(false), low, false},
		{"parentbased root", ParentBased(AlwaysOn()), none, low, true},
	} {
		if got := tc.s.sample(tc.parent, tc.id); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// Through the tracer: a remote unsampled parent makes a
	// non-recording child that carries the trace on.
	exp := &memExporter{}
	tr := New(Config{}, exp)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote(false))
	_, s := tr.Tracer("t").Start(ctx, "dropped")
	if s.IsRecording() || s.SpanContext().TraceID() != (trace.TraceID{1}) || s.SpanContext().IsSampled() {
		t.Errorf("child of an unsampled remote parent: recording %v, %v", s.IsRecording(), s.SpanContext())
	}
	s.End()
	_ = tr.Shutdown(context.Background())
	if len(exp.spans) != 0 {
		t.Errorf("an unsampled span was exported")
	}
}

// TestBatcherDropsAndFlushes: with the exporter stuck, spans beyond the
// queue are dropped and counted; ForceFlush then exports the rest.
func TestBatcherDropsAndFlushes(t *testing.T) {
	exp := &memExporter{block: make(chan struct{})}
	tr := New(Config{Batch: BatchConfig{MaxQueueSize: 4, MaxExportBatchSize: 2}}, exp)
	tracer := tr.Tracer("t")
	for i := range 20 {
		_, s := tracer.Start(context.Background(), fmt.Sprint(i))
		s.End()
	}
	if tr.Dropped() == 0 {
		t.Fatal("nothing dropped with the exporter stuck and a queue of 4")
	}
	close(exp.block)
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := int64(len(exp.spans)) + tr.Dropped(); got != 20 {
		t.Errorf("%d exported + %d dropped, want 20", len(exp.spans), tr.Dropped())
	}
	if got := testutil.ToFloat64(tr.DroppedCollector()); got != float64(tr.Dropped()) {
		t.Errorf("cellgate_trace_spans_dropped_total = %v, Dropped() = %d", got, tr.Dropped())
	}
	_ = tr.Shutdown(context.Background())
	_, s := tracer.Start(context.Background(), "late")
	s.End()
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBatcherYieldsWhenBehind: with one P, held by a goroutine that ends
// spans without ever blocking, the export goroutine runs only when that
// goroutine yields, which it does once half the queue waits: no span is
// dropped, though the queue holds a hundredth of them.
func TestBatcherYieldsWhenBehind(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var exported atomic.Int64
	tr := New(Config{Batch: BatchConfig{MaxQueueSize: 64, MaxExportBatchSize: 8}},
		exporterFunc(func(spans []*SpanRecord) { exported.Add(int64(len(spans))) }))
	tracer := tr.Tracer("t")
	const spans = 6400
	for range spans {
		_, s := tracer.Start(context.Background(), "busy")
		s.End()
	}
	if d := tr.Dropped(); d != 0 {
		t.Errorf("%d of %d spans dropped with a queue of 64: the export goroutine did not run", d, spans)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exported.Load(); got != spans {
		t.Errorf("%d spans exported, want %d", got, spans)
	}
}

// TestRecordReuseNeverLeaks: records are reused across many concurrent
// spans (run with -race), and a span held after End keeps its own
// context and writes nothing into a record another span now uses.
func TestRecordReuseNeverLeaks(t *testing.T) {
	var exported atomic.Int64
	check := exporterFunc(func(spans []*SpanRecord) {
		for _, r := range spans {
			v, _ := attrOf(r.Stub(), "name")
			if v.AsString() != r.Name() || len(r.Attributes()) != 1 {
				t.Errorf("span %q carries %v", r.Name(), r.Attributes())
			}
			exported.Add(1)
		}
	})
	tr := New(Config{Batch: BatchConfig{MaxQueueSize: 64, MaxExportBatchSize: 8, Blocking: true}}, check)
	tracer := tr.Tracer("t")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var old []trace.Span
			for i := range 500 {
				name := fmt.Sprintf("%d-%d", g, i)
				_, s := tracer.Start(context.Background(), name)
				s.SetAttributes(attribute.String("name", name))
				s.End()
				old = append(old, s)
			}
			for _, s := range old { // stale spans: no effect on live records
				s.SetAttributes(attribute.String("name", "stale"))
				s.SetName("stale")
				s.AddEvent("stale")
				s.End()
			}
		}()
	}
	wg.Wait()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exported.Load() != 2000 {
		t.Errorf("%d spans exported, want 2000", exported.Load())
	}
}

// TestRecordExtensionReset: a record reused after a span that had
// everything of the extension (a trace state, events, links, an error's
// description, dropped attributes, attributes of its own) carries none of
// it into the next span, which has none of its own.
func TestRecordExtensionReset(t *testing.T) {
	exp := &memExporter{}
	tr := New(Config{}, exp)
	defer func() { _ = tr.Shutdown(context.Background()) }()
	tracer := tr.Tracer("t")
	ts, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	}))
	link := trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{3}, SpanID: [8]byte{4}})}
	_, full := tracer.Start(parent, "full", trace.WithLinks(link))
	full.SetAttributes(attribute.String("a", "1"), attribute.KeyValue{})
	full.AddEvent("e")
	full.SetStatus(codes.Error, "boom")
	full.End()
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, plain := tracer.Start(context.Background(), "plain")
	plain.End()
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, p := exp.byName(t, "full"), exp.byName(t, "plain")
	if f.SpanContext.TraceState().String() != "vendor=value" || f.Parent.TraceState().String() != "vendor=value" ||
		!f.Parent.IsRemote() || len(f.Events) != 1 || len(f.Links) != 1 || f.Status.Description != "boom" ||
		f.DroppedAttributes != 1 || len(f.Attributes) != 1 {
		t.Fatalf("the full span lost something: %+v", f)
	}
	if p.SpanContext.TraceState().Len() != 0 || p.Parent.IsValid() || len(p.Events) != 0 || len(p.Links) != 0 ||
		p.Status.Code != codes.Unset || p.Status.Description != "" || p.DroppedAttributes != 0 || len(p.Attributes) != 0 {
		t.Errorf("the plain span carries the full span's: %+v", p)
	}
}

type exporterFunc func([]*SpanRecord)

func (f exporterFunc) ExportSpans(_ context.Context, s []*SpanRecord) error { f(s); return nil }
func (f exporterFunc) Shutdown(context.Context) error                       { return nil }

// roomContext is a context with a SpanRoom, as a request's own context
// (reqctx) has one: Value asks the room first.
type roomContext struct {
	context.Context
	room SpanRoom
}

func (c *roomContext) Value(key any) any {
	if v, ok := c.room.Value(key); ok {
		return v
	}
	return c.Context.Value(key)
}

// start starts a span in the context's room, the context adopting what
// the tracer derived (another tracer's span).
func (c *roomContext) start(tracer trace.Tracer, name string, start time.Time) trace.Span {
	var s trace.Span
	c.Context, s = c.room.Start(c.Context, tracer, name, trace.SpanKindServer, start)
	return s
}

// TestSpanRoom: a span started in a room is what the API finds in the
// room's context and in contexts derived from it, its parent is the trace
// extracted under the room, and it keeps the start and end times its
// caller read (Start's start, End's timestamp). An empty room answers no
// key.
func TestSpanRoom(t *testing.T) {
	if spanKey == nil {
		t.Fatal("the trace API's span key was not learnt")
	}
	exp := &memExporter{}
	tr := New(Config{}, exp)
	c := &roomContext{Context: context.Background()}
	if v, ok := c.room.Value(spanKey); ok || v != nil || trace.SpanFromContext(c).SpanContext().IsValid() {
		t.Fatalf("an empty room answers %v, %v", v, ok)
	}
	c.Context = tr.Propagator.Extract(c.Context, propagationCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	under := c.Context
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := c.start(tr.Tracer("t"), "server", start)
	if c.Context != under {
		t.Error("the recorder's span derived a context")
	}
	derived := context.WithValue(c, derivedKey{}, 1)
	if trace.SpanFromContext(c) != s || trace.SpanFromContext(derived) != s {
		t.Fatal("the API does not find the room's span")
	}
	if s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("trace %v: the extracted parent was not used", s.SpanContext().TraceID())
	}
	end := start.Add(1500 * time.Microsecond)
	s.End(trace.WithTimestamp(end))
	s.End(trace.WithTimestamp(end.Add(time.Hour))) // ended already: no second record
	_ = tr.Shutdown(context.Background())
	r := exp.byName(t, "server")
	if r.SpanKind != trace.SpanKindServer || !r.Parent.IsRemote() {
		t.Errorf("room span %+v", r)
	}
	if !r.StartTime.Equal(start) || !r.EndTime.Equal(end) {
		t.Errorf("room span from %v to %v, want %v to %v", r.StartTime, r.EndTime, start, end)
	}
}

// TestSpanRoomOtherTracer: another tracer's span is not in the room: the
// context the tracer derived carries it, and the caller's context becomes
// that one.
func TestSpanRoomOtherTracer(t *testing.T) {
	sdk := sdktrace.NewTracerProvider()
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	c := &roomContext{Context: context.Background()}
	s := c.start(sdk.Tracer("t"), "server", time.Time{})
	defer s.End()
	if _, ok := c.room.Value(spanKey); ok {
		t.Error("the room holds another tracer's span")
	}
	if trace.SpanFromContext(c) != s || !s.SpanContext().IsValid() {
		t.Error("the derived context does not carry the span")
	}
}

// TestSpanRoomUnsampled: a span the sampler drops, started in a room,
// is the room's span all the same: the API finds it, it carries the
// extracted trace on unsampled, records nothing, and its start
// allocates nothing.
func TestSpanRoomUnsampled(t *testing.T) {
	exp := &memExporter{}
	tr := New(Config{Sampler: ptr(ParentBased(AlwaysOn()))}, exp)
	tracer := tr.Tracer("t")
	c := &roomContext{Context: context.Background()}
	c.Context = tr.Propagator.Extract(c.Context, propagationCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"})
	s := c.start(tracer, "server", time.Time{})
	if trace.SpanFromContext(c) != s || s.IsRecording() || s.SpanContext().IsSampled() ||
		s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("unsampled room span: recording %v, %v", s.IsRecording(), s.SpanContext())
	}
	s.SetAttributes(attribute.Int("n", 1))
	EndWithSharedAttributes(s, []attribute.KeyValue{attribute.Int("m", 2)}, time.Now(), time.Millisecond)
	_ = tr.Shutdown(context.Background())
	if len(exp.spans) != 0 {
		t.Errorf("an unsampled span was exported: %d spans", len(exp.spans))
	}
	if n := testing.AllocsPerRun(100, func() {
		c.start(tracer, "server", time.Time{})
	}); n != 0 {
		t.Errorf("an unsampled room span allocates %v times", n)
	}
}

type propagationCarrier map[string]string

func (c propagationCarrier) Get(k string) string { return c[k] }
func (c propagationCarrier) Set(k, v string)     { c[k] = v }
func (c propagationCarrier) Keys() []string {
	var ks []string
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// derivedKey is a context key of TestSpanRoom's derived context.
type derivedKey struct{}

// TestEndWithSharedAttributes: a span ended with a shared slice exports
// it and ends d after start, once; attributes the span set before are
// kept, the slice's values winning, and the caller's slice never
// changes; a change after the end changes nothing; and the record, reused
// once exported, starts the next spans with only their own attributes.
func TestEndWithSharedAttributes(t *testing.T) {
	ctx := context.Background()
	exp := &memExporter{}
	tr := New(Config{Batch: BatchConfig{MaxQueueSize: 1, MaxExportBatchSize: 1, Blocking: true}}, exp)
	tracer := tr.Tracer("t")
	shared := []attribute.KeyValue{attribute.String("a", "1"), attribute.Int("b", 2)}
	before := append([]attribute.KeyValue(nil), shared...)
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	const d = 1500 * time.Microsecond
	span := func(name string, f func(trace.Span)) {
		_, s := tracer.Start(ctx, name, trace.WithTimestamp(start))
		f(s)
		if err := tr.ForceFlush(ctx); err != nil { // the record goes back to the free list
			t.Fatal(err)
		}
	}
	span("shared", func(s trace.Span) {
		EndWithSharedAttributes(s, shared, start, d)
		s.SetAttributes(attribute.Int("b", 3)) // ended: changes nothing
		EndWithSharedAttributes(s, shared, start, time.Hour)
	})
	span("merged", func(s trace.Span) {
		s.SetAttributes(attribute.Int("b", 3), attribute.Bool("c", true))
		EndWithSharedAttributes(s, shared, start, d)
	})
	span("bare", func(s trace.Span) { s.End(trace.WithTimestamp(start.Add(d))) })
	span("own", func(s trace.Span) {
		s.SetAttributes(attribute.String("d", "4"))
		s.End(trace.WithTimestamp(start.Add(d)))
	})
	_ = tr.Shutdown(ctx)

	for i := range shared {
		if shared[i] != before[i] {
			t.Fatalf("the caller's slice changed: %v, was %v", shared, before)
		}
	}
	if len(exp.spans) != 4 {
		t.Fatalf("%d spans exported, want 4 (one per span)", len(exp.spans))
	}
	for name, want := range map[string][]attribute.KeyValue{
		"shared": before,
		"merged": {attribute.Int("b", 2), attribute.Bool("c", true), attribute.String("a", "1")},
		"bare":   nil,
		"own":    {attribute.String("d", "4")},
	} {
		got := exp.byName(t, name)
		if !got.StartTime.Equal(start) || !got.EndTime.Equal(start.Add(d)) {
			t.Errorf("span %s from %v to %v, want %v to %v", name, got.StartTime, got.EndTime, start, start.Add(d))
		}
		if len(got.Attributes) != len(want) {
			t.Errorf("span %s: attributes %v, want %v", name, got.Attributes, want)
			continue
		}
		for i := range want {
			if got.Attributes[i] != want[i] {
				t.Errorf("span %s: attributes %v, want %v", name, got.Attributes, want)
				break
			}
		}
	}
}

// TestEndWithSharedAttributesOtherTracer: a span of another tracer (the
// SDK's) gets the attributes and the end time all the same.
func TestEndWithSharedAttributesOtherTracer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	_, s := tp.Tracer("t").Start(context.Background(), "sdk", trace.WithTimestamp(start))
	EndWithSharedAttributes(s, []attribute.KeyValue{attribute.String("a", "1")}, start, time.Second)
	got := exp.GetSpans()
	if len(got) != 1 || len(got[0].Attributes) != 1 || got[0].Attributes[0] != attribute.String("a", "1") ||
		!got[0].EndTime.Equal(start.Add(time.Second)) {
		t.Fatalf("SDK span %+v", got)
	}
}
