package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/shards"
)

// ObserveConfig configures Observe.
type ObserveConfig struct {
	// Tracer makes the enqueue and job spans; nil: no spans, no trace
	// context stored with jobs.
	Tracer trace.TracerProvider
	// Propagator writes the enqueuing span's context into the job
	// (InsertParams.TraceContext) and reads it back for the job's span;
	// nil: W3C trace context.
	Propagator propagation.TextMapPropagator
	// TraceTenant adds the tenant id to the spans (cellgate.tenant):
	// opt-in, since a trace backend then holds tenant ids.
	TraceTenant bool
	// Registerer receives the job duration and wait histograms; nil: none.
	Registerer prometheus.Registerer
}

// Observe returns the insert and worker middleware that trace jobs and
// time them (the insert middleware is nil without a tracer):
//
//   - an enqueue inside a traced operation gets a producer span
//     ("enqueue <kind>"), whose context is stored with the job;
//   - each attempt gets a consumer span ("job <kind>"), a child of the
//     enqueue span (so an attempt and its retries are spans of the
//     enqueuing request's trace), with kind, queue, id, attempt and the
//     wait since the enqueue;
//   - cellgate_job_duration_seconds{kind} times each attempt and
//     cellgate_job_wait_seconds{queue} the wait of each first attempt
//     (per queue, never per tenant), with the trace id as an exemplar
//     when the attempt's span is sampled.
func Observe(cfg ObserveConfig) (InsertMiddleware, Middleware, error) {
	o := &observe{traceTenant: cfg.TraceTenant, prop: cfg.Propagator}
	if o.prop == nil {
		o.prop = propagation.TraceContext{}
	}
	if cfg.Tracer != nil {
		o.tracer = cfg.Tracer.Tracer("github.com/cellgate/cellgate/internal/jobs")
	}
	o.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cellgate_job_duration_seconds",
		Help:    "Time one attempt of a job ran, by kind.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"kind"})
	o.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cellgate_job_wait_seconds",
		Help:    "Time from a job's enqueue (or its run_at, if later) to its first attempt's start, by queue.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
	}, []string{"queue"})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{o.duration, o.wait} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, nil, err
			}
		}
	}
	if o.tracer == nil {
		return nil, o.work, nil // nothing to do around an enqueue
	}
	return o.insert, o.work, nil
}

type observe struct {
	tracer      trace.Tracer
	prop        propagation.TextMapPropagator
	traceTenant bool
	duration    *prometheus.HistogramVec
	wait        *prometheus.HistogramVec
}

func (o *observe) insert(next InsertFunc) InsertFunc {
	return func(ctx context.Context, tx *shards.Tx, ps []InsertParams) ([]EnqueueResult, error) {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, tx, ps)
		}
		name := "enqueue " + ps[0].Kind
		if len(ps) > 1 {
			name = "enqueue"
		}
		ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			attribute.String("cellgate.job.kind", ps[0].Kind), attribute.String("cellgate.job.queue", ps[0].Queue),
			attribute.Int("cellgate.job.count", len(ps)), attribute.Bool("cellgate.job.in_transaction", tx != nil)))
		defer span.End()
		if o.traceTenant && ps[0].Tenant != "" {
			span.SetAttributes(attribute.String("cellgate.tenant", ps[0].Tenant))
		}
		carrier := propagation.MapCarrier{}
		o.prop.Inject(ctx, carrier)
		for i := range ps {
			ps[i].TraceContext = carrier
		}
		rs, err := next(ctx, tx, ps)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(rs) == 1 {
			span.SetAttributes(attribute.Int64("cellgate.job.id", int64(rs[0].ID)), attribute.Bool("cellgate.job.duplicate", rs[0].Duplicate))
		}
		return rs, err
	}
}

func (o *observe) work(next WorkFunc) WorkFunc {
	return func(ctx context.Context, job *JobRow) error {
		start := time.Now()
		var span trace.Span
		if o.tracer != nil {
			if len(job.TraceContext) > 0 {
				ctx = o.prop.Extract(ctx, propagation.MapCarrier(job.TraceContext))
			}
			ctx, span = o.tracer.Start(ctx, "job "+job.Kind, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
				attribute.String("cellgate.job.kind", job.Kind), attribute.String("cellgate.job.queue", job.Queue),
				attribute.Int64("cellgate.job.id", int64(job.ID)), attribute.Int("cellgate.job.attempt", job.Attempt),
				attribute.Int("cellgate.job.max_attempts", job.MaxAttempts),
				attribute.Float64("cellgate.job.wait_seconds", start.Sub(job.EnqueuedAt).Seconds())))
			if o.traceTenant && job.Tenant != "" {
				span.SetAttributes(attribute.String("cellgate.tenant", job.Tenant))
			}
		}
		var exemplar prometheus.Labels
		if span != nil && span.SpanContext().IsSampled() {
			exemplar = prometheus.Labels{"trace_id": span.SpanContext().TraceID().String()}
		}
		if job.Attempt == 1 && !job.EnqueuedAt.IsZero() {
			observeWith(o.wait.WithLabelValues(job.Queue), max(start.Sub(job.EnqueuedAt), 0).Seconds(), exemplar)
		}
		err := next(ctx, job)
		observeWith(o.duration.WithLabelValues(job.Kind), time.Since(start).Seconds(), exemplar)
		if span != nil {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
		return err
	}
}

func observeWith(o prometheus.Observer, v float64, exemplar prometheus.Labels) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && exemplar != nil {
		eo.ObserveWithExemplar(v, exemplar)
		return
	}
	o.Observe(v)
}

// Log is the job-scoped logger of one attempt: base with the job's id,
// kind, queue, attempt and tenant, and the trace and span ids of the
// attempt's span when ctx (the worker's) holds one.
func (j *Job[T]) Log(ctx context.Context, base *slog.Logger) *slog.Logger {
	attrs := make([]any, 0, 8)
	attrs = append(attrs, slog.Int64("job_id", int64(j.ID)), slog.String("kind", j.Kind), slog.String("queue", j.Queue),
		slog.Int("attempt", j.Attempt))
	if j.Tenant != "" {
		attrs = append(attrs, slog.String("tenant", j.Tenant))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return base.With(attrs...)
}
