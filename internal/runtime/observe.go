package runtime

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenant"
)

// AccessLog configures the access log: one line per request of a spec
// route (probes and unrouted paths have none).
type AccessLog struct {
	// Off writes no access log.
	Off bool
	// Level is the lines' level (a logger above it writes none).
	Level slog.Level
	// Sample is the share of lines written, in (0, 1]; 0 means 1. A
	// request answered 5xx is always written.
	Sample float64
}

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

// route returns the middleware for one route. Its series are bound at
// registration, so without tracing and access log a request pays two
// clock reads, one counter increment and one histogram observation, with
// no label lookup.
func (o *observer) route(method, path string) echo.MiddlewareFunc {
	m := o.metrics
	var counts [len(statusClasses)]prometheus.Counter
	for i, class := range statusClasses {
		counts[i] = m.requests.WithLabelValues(path, method, class)
	}
	obs := m.duration.WithLabelValues(path, method)
	exemplars, _ := obs.(prometheus.ExemplarObserver)
	name := method + " " + path
	startAttrs := trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("http.route", path))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			var span trace.Span
			if o.tracer != nil {
				req := c.Request()
				ctx := req.Context()
				if len(req.Header["Traceparent"]) > 0 {
					// A caller's trace (the router's): continue it.
					ctx = o.prop.Extract(ctx, propagation.HeaderCarrier(req.Header))
				}
				ctx, span = o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), startAttrs)
				c.SetRequest(req.WithContext(ctx))
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
				counts[i].Inc()
				d := time.Since(start)
				if span != nil && exemplars != nil && span.SpanContext().IsSampled() {
					exemplars.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": span.SpanContext().TraceID().String()})
				} else {
					obs.Observe(d.Seconds())
				}
				if span != nil || !o.access.Off {
					o.finish(c, span, path, method, status, d, err)
				}
			}()
			err = next(c)
			returned = true
			return err
		}
	}
}

// finish ends the span and writes the access log and refusal lines: the
// part of a request's observation that tracing or the access log asks for.
func (o *observer) finish(c echo.Context, span trace.Span, path, method string, status int, d time.Duration, err error) {
	ctx := c.Request().Context()
	ten, _ := tenant.From(ctx)
	rej, refused := rejectionOf(err)
	if span != nil {
		attrs := make([]attribute.KeyValue, 1, 3)
		attrs[0] = attribute.Int("http.response.status_code", status)
		if o.cell != "" {
			attrs = append(attrs, attribute.String("cellgate.cell", o.cell))
		}
		if o.traceTenant && ten != "" {
			attrs = append(attrs, attribute.String("cellgate.tenant", ten))
		}
		span.SetAttributes(attrs...)
		if refused {
			span.AddEvent("refused", trace.WithAttributes(
				attribute.String("cellgate.refusal.code", rej.Code), attribute.Int("http.response.status_code", rej.Status)))
		}
		switch {
		case status == 499:
			span.SetStatus(codes.Error, "client went away")
		case status >= 500:
			msg := http.StatusText(status)
			if refused {
				msg = rej.Code
			}
			span.SetStatus(codes.Error, msg)
		}
		defer span.End()
	}
	id := c.Response().Header().Get(requestid.Header)
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		traceID = sc.TraceID().String()
	}
	if refused {
		if ok, held := o.refusals.AllowAt(rej.Code, time.Now()); ok {
			o.log.LogAttrs(context.Background(), slog.LevelWarn, "request refused",
				slog.String("code", rej.Code), slog.Int("status", rej.Status), slog.String("route", path),
				slog.String("tenant", ten), slog.String("request_id", id), slog.String("trace_id", traceID),
				slog.Int("held_back", held))
		}
	}
	if o.access.Off || (status < 500 && o.access.Sample > 0 && o.access.Sample < 1 && rand.Float64() >= o.access.Sample) {
		return
	}
	if !o.log.Enabled(ctx, o.access.Level) {
		return
	}
	o.log.LogAttrs(context.Background(), o.access.Level, "request",
		slog.String("method", method), slog.String("route", path), slog.Int("status", status),
		slog.Float64("duration_seconds", d.Seconds()), slog.Int64("bytes", c.Response().Size),
		slog.String("request_id", id), slog.String("trace_id", traceID),
		slog.String("tenant", ten), slog.String("cell", o.cell))
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
// share of lines written, in (0, 1]; default 1).
func AccessLogFromEnv(getenv func(string) string) (AccessLog, error) {
	a := AccessLog{Level: slog.LevelInfo, Sample: 1}
	switch v := getenv("CELLGATE_ACCESS_LOG"); v {
	case "off", "none":
		a.Off = true
	default:
		l, err := telemetry.ParseLevel("CELLGATE_ACCESS_LOG", v)
		if err != nil {
			return a, err
		}
		a.Level = l
	}
	if v := getenv("CELLGATE_ACCESS_LOG_SAMPLE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			return a, &configError{name: "CELLGATE_ACCESS_LOG_SAMPLE", msg: "want a share in (0, 1], got " + strconv.Quote(v)}
		}
		a.Sample = f
	}
	return a, nil
}

type configError struct{ name, msg string }

func (e *configError) Error() string { return e.name + ": " + e.msg }
