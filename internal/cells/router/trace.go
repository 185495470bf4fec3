package router

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/httpguard"
)

// startSpan starts the router's server span for r when tracing is on:
// continuing the client's traceparent, and putting the span's own into the
// request's header, which ReverseProxy forwards to the cell. r is returned
// with the span in its context; without tracing r is returned as it is.
func (p *Proxy) startSpan(r *http.Request) (*http.Request, trace.Span) {
	if p.tracer == nil {
		return r, nil
	}
	carrier := propagation.HeaderCarrier(r.Header)
	ctx := p.prop.Extract(r.Context(), carrier)
	ctx, span := p.tracer.Start(ctx, "router "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method)))
	p.prop.Inject(ctx, carrier)
	return r.WithContext(ctx), span
}

// routedSpan records where the router sent a tenant.
func (p *Proxy) routedSpan(span trace.Span, b *backend, slot int, tenant string) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("cellgate.slot", slot))
	if b != nil {
		span.SetAttributes(attribute.String("cellgate.cell", b.name))
	}
	if p.cfg.TraceTenant && tenant != "" {
		span.SetAttributes(attribute.String("cellgate.tenant", tenant))
	}
}

// refusedSpan records a refusal on r's span (an event naming the refusal
// code, and the span's status) and on w's access line. A request without
// a recording span costs a context look-up on the refusal path only.
func refusedSpan(w http.ResponseWriter, r *http.Request, prob *httpguard.Problem) {
	answered(w, prob)
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.AddEvent("refused", trace.WithAttributes(attribute.String("cellgate.refusal.code", prob.Code),
		attribute.Int("http.response.status_code", prob.Status)))
	span.SetAttributes(attribute.String("cellgate.refusal.code", prob.Code))
	spanStatus(r, prob.Status, prob.Code)
}

// spanStatus records the answer's status on r's span (r may be the
// request forwarded to the cell: it carries the same context).
func spanStatus(r *http.Request, status int, msg string) {
	if r == nil {
		return
	}
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 || status == statusClientGone {
		if msg == "" {
			msg = strconv.Itoa(status)
		}
		span.SetStatus(codes.Error, msg)
	}
}
