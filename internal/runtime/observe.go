package runtime

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/reqctx"
	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenant"
)

// AccessLog configures the access log: one line per request of a spec
// route (probes and unrouted paths have none). See telemetry.AccessLog.
type AccessLog = telemetry.AccessLog

// observer is the per-route observation: the server span, the request
// metrics (with the trace id as an exemplar), the access log line and the
// rate-limited refusal line.
type observer struct {
	metrics     *httpMetrics
	log         *slog.Logger
	tracer      trace.Tracer // nil: tracing off, no span
	prop        propagation.TextMapPropagator
	traceTenant bool
	access      AccessLog
	cell        string
	refusals    *telemetry.Limiter
}

// refusalLines is how many refusal lines per refusal code a cell writes
// each refusalEvery: a flood of refusals leaves a few lines, each saying
// how many were held back, never one per request.
const (
	refusalLines = 5
	refusalEvery = 10 * time.Second
)

// route returns the middleware for one route. Its series, span name and
// span attributes are bound at registration, so without tracing and
// access log a request pays two clock reads, one counter increment and one
// histogram observation, with no label lookup; with tracing it adds the
// recorder's span, put in the request's own context (reqctx), and nothing
// built per request of its own.
func (o *observer) route(method, path string) echo.MiddlewareFunc {
	r := o.newRoute(method, path)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			var span trace.Span
			if o.tracer != nil {
				span = r.startSpan(c, o.tracer, o.prop, start)
			}
			returned := false
			defer func() {
				status := http.StatusInternalServerError // a panic: recover answers 500
				if returned {
					status = c.Response().Status
					if err != nil && !c.Response().Committed {
						// The error handler writes the response after us.
						status = errorStatus(err).status
					}
				}
				i := status / 100
				if i < 1 || i >= gone {
					i = 0
				}
				if returned && err != nil && !c.Response().Committed && clientGone(c, err) {
					i, status = gone, 499
				}
				r.counts[i].Inc()
				d := time.Since(start)
				r.observe(span, start, d)
				if span != nil || !o.access.Off {
					o.finish(c, span, r, status, start, d, err)
				}
			}()
			err = next(c)
			returned = true
			return err
		}
	}
}

// routeObs is what one route's observation binds at registration.
type routeObs struct {
	method, path string
	counts       [len(statusClasses)]prometheus.Counter
	obs          prometheus.Observer
	exemplars    prometheus.ExemplarObserver // nil: the histogram takes none
	// exemplarNext is, per duration bucket (+Inf last), the Unix time in
	// ns before which the bucket takes no new exemplar (exemplarEvery).
	exemplarNext [len(durationBuckets) + 1]atomic.Int64
	name         string
	// baseAttrs are the span's method, route and cell; endAttrs caches,
	// per status, baseAttrs with http.response.status_code, so a span's
	// attributes are one slice set once, at its end.
	baseAttrs []attribute.KeyValue
	endAttrs  [600]atomic.Pointer[[]attribute.KeyValue]
}

// exemplarEvery is how often a route's duration bucket takes a new trace
// id exemplar. A histogram keeps one exemplar per bucket, and a scrape
// (every 15 s or more) sees only the last, so one a second per bucket
// loses nothing a dashboard shows, while one per request would cost the
// exemplar's labels, string and timestamp on every traced request.
const exemplarEvery = time.Second

// newRoute binds a route's series and span name and attributes.
func (o *observer) newRoute(method, path string) *routeObs {
	m := o.metrics
	r := &routeObs{method: method, path: path, name: method + " " + path}
	for i, class := range statusClasses {
		r.counts[i] = m.requests.WithLabelValues(path, method, class)
	}
	r.obs = m.duration.WithLabelValues(path, method)
	r.exemplars, _ = r.obs.(prometheus.ExemplarObserver)
	r.baseAttrs = []attribute.KeyValue{attribute.String("http.request.method", method), attribute.String("http.route", path)}
	if o.cell != "" {
		r.baseAttrs = append(r.baseAttrs, attribute.String("cellgate.cell", o.cell))
	}
	r.baseAttrs = slices.Clip(r.baseAttrs)
	return r
}

// spanAttrs returns the route's span attributes for an answer of status,
// built on the status's first answer and shared read-only after.
func (r *routeObs) spanAttrs(status int) []attribute.KeyValue {
	if status < 0 || status >= len(r.endAttrs) {
		return append(r.baseAttrs, telemetry.StatusCodeAttr(status)...)
	}
	if p := r.endAttrs[status].Load(); p != nil {
		return *p
	}
	a := append(r.baseAttrs, telemetry.StatusCodeAttr(status)...)
	r.endAttrs[status].Store(&a)
	return a
}

// startSpan starts the route's server span at start (the observation's
// clock reading: the span and the duration metric cover the same time),
// continuing a caller's trace (the router's), and puts it in the
// request's context: in the request's own context when the request scope
// made one, else in a copy of the request.
func (r *routeObs) startSpan(c echo.Context, tracer trace.Tracer, prop propagation.TextMapPropagator, start time.Time) trace.Span {
	req := c.Request()
	ctx := req.Context()
	if own := reqctx.Of(ctx); own != nil {
		// The request scope's context has room for the span: no copy of
		// the request.
		if len(req.Header["Traceparent"]) > 0 {
			own.Extract(prop, propagation.HeaderCarrier(req.Header))
		}
		return own.StartSpan(tracer, r.name, trace.SpanKindServer, start)
	}
	if len(req.Header["Traceparent"]) > 0 {
		ctx = prop.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	ctx, span := tracer.Start(ctx, r.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	c.SetRequest(req.WithContext(ctx))
	return span
}

// observe records the request's duration, with the trace id as an
// exemplar when the span is sampled and its bucket is due one.
func (r *routeObs) observe(span trace.Span, start time.Time, d time.Duration) {
	secs := d.Seconds()
	if span == nil || r.exemplars == nil {
		r.obs.Observe(secs)
		return
	}
	// The bucket's turn first, the span's sampling only when due: a
	// bucket takes one exemplar a second, so nearly every request stops
	// at the first test. Buckets found by a scan from the smallest (the
	// histogram scans too): a request lands in the first few.
	b := 0
	for b < len(durationBuckets) && durationBuckets[b] < secs {
		b++
	}
	next := &r.exemplarNext[b]
	now := start.UnixNano() + int64(d)
	if due := next.Load(); now < due || !span.SpanContext().IsSampled() || !next.CompareAndSwap(due, now+int64(exemplarEvery)) {
		r.obs.Observe(secs)
		return
	}
	r.exemplars.ObserveWithExemplar(secs, prometheus.Labels{"trace_id": span.SpanContext().TraceID().String()})
}

// finish ends the span and writes the access log and refusal lines: the
// part of a request's observation that tracing or the access log asks for.
func (o *observer) finish(c echo.Context, span trace.Span, r *routeObs, status int, start time.Time, d time.Duration, err error) {
	rej, refused := rejectionOf(err)
	if span != nil {
		o.endSpan(c, span, r.spanAttrs(status), status, rej, start, d)
	}
	if !refused && (o.access.Off || !o.access.Writes(status) || !o.log.Enabled(context.Background(), o.access.Level)) {
		return
	}
	ctx := c.Request().Context()
	ten, _ := tenant.From(ctx)
	id := c.Response().Header().Get(requestid.Header)
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		traceID = sc.TraceID().String()
	}
	if refused {
		if ok, held := o.refusals.AllowAt(rej.Code, time.Now()); ok {
			o.log.LogAttrs(context.Background(), slog.LevelWarn, "request refused",
				slog.String("code", rej.Code), slog.Int("status", rej.Status), slog.String("route", r.path),
				slog.String("tenant", ten), slog.String("request_id", id), slog.String("trace_id", traceID),
				slog.Int("held_back", held))
		}
		if o.access.Off || !o.access.Writes(status) || !o.log.Enabled(ctx, o.access.Level) {
			return
		}
	}
	o.log.LogAttrs(context.Background(), o.access.Level, "request",
		slog.String("method", r.method), slog.String("route", r.path), slog.Int("status", status),
		slog.Float64("duration_seconds", d.Seconds()), slog.Int64("bytes", c.Response().Size),
		slog.String("request_id", id), slog.String("trace_id", traceID),
		slog.String("tenant", ten), slog.String("cell", o.cell))
}

// endSpan sets the opt-in tenant, the refusal event and the error
// status, and ends the span with the route's attributes (built once per
// status), d after start: the span and the duration metric cover the
// same time, and no clock is read for the span. The span's attributes
// are all set here, none at its start: start attributes would cost a
// copy into a start configuration per request, and no sampler FromEnv
// builds reads them.
func (o *observer) endSpan(c echo.Context, span trace.Span, attrs []attribute.KeyValue, status int, rej *bulkhead.Rejection, start time.Time, d time.Duration) {
	if o.traceTenant {
		if ten, _ := tenant.From(c.Request().Context()); ten != "" {
			span.SetAttributes(attribute.String("cellgate.tenant", ten))
		}
	}
	if rej != nil {
		span.AddEvent("refused", trace.WithAttributes(
			attribute.String("cellgate.refusal.code", rej.Code), attribute.Int("http.response.status_code", rej.Status)))
	}
	switch {
	case status == 499:
		span.SetStatus(codes.Error, "client went away")
	case status >= 500:
		msg := http.StatusText(status)
		if rej != nil {
			msg = rej.Code
		}
		span.SetStatus(codes.Error, msg)
	}
	telemetry.EndWithSharedAttributes(span, attrs, start, d)
}

// Logger is the request-scoped logger of a route's handler: the server's
// logger with the request id, the trace id (when tracing is on), the
// tenant (on a tenant route), the route and the cell.
func Logger(c echo.Context) *slog.Logger {
	base := slog.Default()
	cell := ""
	if l, ok := c.Echo().Logger.(echoLogger); ok {
		base, cell = l.slog, l.cell
	}
	ctx := c.Request().Context()
	attrs := make([]any, 0, 10)
	attrs = append(attrs, slog.String("request_id", c.Response().Header().Get(requestid.Header)))
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if t, _ := tenant.From(ctx); t != "" {
		attrs = append(attrs, slog.String("tenant", t))
	}
	attrs = append(attrs, slog.String("route", c.Path()))
	if cell != "" {
		attrs = append(attrs, slog.String("cell", cell))
	}
	return base.With(attrs...)
}

// echoLogger is Echo's logger (kept for what Echo logs itself) carrying the
// server's slog logger, so Logger finds it through c.Echo() without a
// value stored per request.
type echoLogger struct {
	echo.Logger
	slog *slog.Logger
	cell string
}

// AccessLogFromEnv reads CELLGATE_ACCESS_LOG (off, or the lines' level:
// debug, info, warn; default info) and CELLGATE_ACCESS_LOG_SAMPLE (the
// share of lines written, in (0, 1]; default 1): telemetry.AccessLogFromEnv.
func AccessLogFromEnv(getenv func(string) string) (AccessLog, error) {
	return telemetry.AccessLogFromEnv(getenv)
}
