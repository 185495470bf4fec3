package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// OTLP exports spans to an OTLP/HTTP receiver as protobuf
// (ExportTraceServiceRequest POSTed to .../v1/traces). OpenTelemetry's own
// otlptracehttp links the collector's service package and with it gRPC;
// this exporter uses only the message packages.
type OTLP struct {
	endpoint string
	headers  http.Header
	gzip     bool
	client   *http.Client
}

// OTLPFromEnv is the OTLP exporter the OTEL_EXPORTER_OTLP_* variables
// describe (see FromEnv).
func OTLPFromEnv(getenv func(string) string) (*OTLP, error) {
	get := func(name string) (string, string) {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name), "OTEL_EXPORTER_OTLP_" + name
	}
	if p, v := get("PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("%s: only http/protobuf is supported, got %q", v, p)
	}
	o := &OTLP{headers: http.Header{"Content-Type": {"application/x-protobuf"}}, client: &http.Client{Timeout: 10 * time.Second}}
	if e := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); e != "" {
		o.endpoint = e
	} else if e := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); e != "" {
		o.endpoint = strings.TrimSuffix(e, "/") + "/v1/traces"
	} else {
		o.endpoint = "http://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(o.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: want an http(s) URL, got %q", o.endpoint)
	}
	if h, v := get("HEADERS"); h != "" {
		for _, kv := range strings.Split(h, ",") {
			k, val, ok := strings.Cut(kv, "=")
			k, err1 := url.QueryUnescape(strings.TrimSpace(k))
			val, err2 := url.QueryUnescape(strings.TrimSpace(val))
			if !ok || k == "" || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: want key=value pairs separated by commas, got %q", v, kv)
			}
			o.headers.Set(k, val)
		}
	}
	if t, v := get("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("%s: want milliseconds > 0, got %q", v, t)
		}
		o.client.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch c, v := get("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		o.gzip = true
		o.headers.Set("Content-Encoding", "gzip")
	default:
		return nil, fmt.Errorf("%s: want gzip or none, got %q", v, c)
	}
	return o, nil
}

// ExportSpans sends one request holding spans; a 429 or 5xx answer is
// retried once after a second (the batch processor calls again with the
// next batch anyway).
func (o *OTLP) ExportSpans(ctx context.Context, spans []*SpanRecord) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := Marshal(spans)
	if err != nil {
		return err
	}
	if o.gzip {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write(body)
		_ = w.Close()
		body = b.Bytes()
	}
	for attempt := 0; ; attempt++ {
		retry, err := o.post(ctx, body)
		if err == nil || !retry || attempt == 1 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func (o *OTLP) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header = o.headers.Clone()
	res, err := o.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("otlp %s: %w", o.endpoint, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 == 2 {
		return false, nil
	}
	retry = res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500
	return retry, fmt.Errorf("otlp %s: %s", o.endpoint, res.Status)
}

// Shutdown closes idle connections.
func (o *OTLP) Shutdown(context.Context) error {
	o.client.CloseIdleConnections()
	return nil
}

// Marshal encodes spans as an ExportTraceServiceRequest: its one field
// (resource_spans = 1) repeated, each a ResourceSpans message, grouped by
// resource and instrumentation scope.
func Marshal(spans []*SpanRecord) ([]byte, error) {
	type scoped struct {
		res   *resource.Resource
		scope *instrumentation.Scope
	}
	var order []scoped
	groups := map[scoped][]*tracepb.Span{}
	for _, s := range spans {
		k := scoped{s.Resource(), s.Scope()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], spanProto(s))
	}
	var out []byte
	byRes := map[*resource.Resource]*tracepb.ResourceSpans{}
	var resOrder []*resource.Resource
	for _, k := range order {
		rs, ok := byRes[k.res]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: kvs(k.res.Attributes())}, SchemaUrl: k.res.SchemaURL()}
			byRes[k.res] = rs
			resOrder = append(resOrder, k.res)
		}
		rs.ScopeSpans = append(rs.ScopeSpans, &tracepb.ScopeSpans{
			Scope:     &commonpb.InstrumentationScope{Name: scopeName(k.scope), Version: scopeVersion(k.scope)},
			SchemaUrl: scopeSchema(k.scope),
			Spans:     groups[k],
		})
	}
	for _, r := range resOrder {
		b, err := proto.Marshal(byRes[r])
		if err != nil {
			return nil, fmt.Errorf("otlp: %w", err)
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out, nil
}

func scopeName(s *instrumentation.Scope) string {
	if s == nil {
		return ""
	}
	return s.Name
}

func scopeVersion(s *instrumentation.Scope) string {
	if s == nil {
		return ""
	}
	return s.Version
}

func scopeSchema(s *instrumentation.Scope) string {
	if s == nil {
		return ""
	}
	return s.SchemaURL
}

// spanProto is s as OTLP's span message. The ids refer to the record's
// own arrays, not copies: Marshal encodes the messages before it returns,
// while the record is still the exporter's.
func spanProto(s *SpanRecord) *tracepb.Span {
	code, description := s.Status()
	droppedAttrs, droppedEvents, droppedLinks := s.Dropped()
	p := &tracepb.Span{
		TraceId:                s.traceID[:],
		SpanId:                 s.spanID[:],
		TraceState:             s.traceState().String(),
		Flags:                  uint32(s.flags) | 0x100, // 0x100: the parent's remoteness is known
		Name:                   s.name,
		Kind:                   tracepb.Span_SpanKind(s.kind), // the API's kinds and OTLP's share their numbers
		StartTimeUnixNano:      uint64(s.start),
		EndTimeUnixNano:        uint64(s.end),
		Attributes:             kvs(s.attrs),
		DroppedAttributesCount: uint32(droppedAttrs),
		DroppedEventsCount:     uint32(droppedEvents),
		DroppedLinksCount:      uint32(droppedLinks),
	}
	if s.parentID.IsValid() {
		p.ParentSpanId = s.parentID[:]
		if s.parentRemote {
			p.Flags |= 0x200
		}
	}
	for _, e := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano: uint64(e.Time.UnixNano()), Name: e.Name, Attributes: kvs(e.Attributes),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{
			TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: kvs(l.Attributes), Flags: uint32(l.SpanContext.TraceFlags()),
		})
	}
	switch code {
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: description}
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return p
}

func kvs(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(attrs))
	for i, a := range attrs {
		out[i] = &commonpb.KeyValue{Key: string(a.Key), Value: anyValue(a.Value)}
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	arr := func(n int, f func(i int) *commonpb.AnyValue) *commonpb.AnyValue {
		vs := make([]*commonpb.AnyValue, n)
		for i := range vs {
			vs[i] = f(i)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.BOOLSLICE:
		s := v.AsBoolSlice()
		return arr(len(s), func(i int) *commonpb.AnyValue { return anyValue(attribute.BoolValue(s[i])) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		return arr(len(s), func(i int) *commonpb.AnyValue { return anyValue(attribute.Int64Value(s[i])) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		return arr(len(s), func(i int) *commonpb.AnyValue { return anyValue(attribute.Float64Value(s[i])) })
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		return arr(len(s), func(i int) *commonpb.AnyValue { return anyValue(attribute.StringValue(s[i])) })
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
}
