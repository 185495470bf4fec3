package telemetry

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is a process's tracer provider and the propagator of the W3C
// trace context (traceparent, tracestate) and baggage.
type Tracing struct {
	// Provider makes the process's tracers; the no-op provider when
	// tracing is off.
	Provider trace.TracerProvider
	// Propagator injects and extracts traceparent, tracestate and baggage.
	Propagator propagation.TextMapPropagator
	// Enabled is false when tracing is off: instrumentation then makes no
	// span at all.
	Enabled bool

	rec *provider // nil when off
}

// Off is tracing switched off: no spans, nothing exported.
func Off() *Tracing {
	return &Tracing{Provider: noop.NewTracerProvider(), Propagator: propagator}
}

var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracer is the named tracer of the provider; nil when tracing is off, so
// a caller's hot path tests one pointer.
func (t *Tracing) Tracer(name string) trace.Tracer {
	if t == nil || !t.Enabled {
		return nil
	}
	return t.Provider.Tracer(name)
}

// Shutdown flushes the spans still queued and stops the exporters; spans
// ended after it are dropped.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.rec == nil {
		return nil
	}
	return t.rec.batch.shutdown(ctx)
}

// ForceFlush exports every span ended before the call, returning the
// exporters' first error.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil || t.rec == nil {
		return nil
	}
	return t.rec.batch.forceFlush(ctx)
}

// Dropped is how many ended spans were not exported because the queue was
// full (OTEL_BSP_MAX_QUEUE_SIZE) or tracing was shut down.
func (t *Tracing) Dropped() int64 {
	if t == nil || t.rec == nil {
		return 0
	}
	return t.rec.batch.dropped.Load()
}

// DroppedCollector is cellgate_trace_spans_dropped_total, the spans
// Dropped counts, for the process's registry: a queue too small for the
// span rate shows here, not as traces that silently lack spans.
func (t *Tracing) DroppedCollector() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cellgate_trace_spans_dropped_total",
		Help: "Ended spans not exported because the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE) or tracing had shut down.",
	}, func() float64 { return float64(t.Dropped()) })
}

// Close flushes and stops the tracing within 5 s, logging a failure: what
// a binary defers after FromEnv.
func (t *Tracing) Close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing shutdown", "error", err.Error())
	}
}

// TraceTenantFromEnv reads CELLGATE_TRACE_TENANT with getenv: whether spans
// carry the tenant id (opt-in; unset is false).
func TraceTenantFromEnv(getenv func(string) string) (bool, error) {
	v := getenv("CELLGATE_TRACE_TENANT")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("CELLGATE_TRACE_TENANT: want true or false, got %q", v)
	}
	return b, nil
}

// FromEnv builds the process's tracing from the standard variables, read
// with getenv:
//
//   - OTEL_SDK_DISABLED=true: off.
//   - OTEL_TRACES_EXPORTER: unset or "none": off; "otlp": OTLP over HTTP
//     (protobuf); "console": JSON lines on stdout; a comma-separated list
//     of these exports to each.
//   - OTEL_EXPORTER_OTLP_ENDPOINT (+ "/v1/traces") or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is), default
//     http://localhost:4318; OTEL_EXPORTER_OTLP_HEADERS,
//     OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_COMPRESSION (gzip)
//     and their _TRACES_ forms; OTEL_EXPORTER_OTLP_PROTOCOL must be
//     http/protobuf (gRPC is not linked).
//   - OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG: always_on, always_off,
//     traceidratio and their parentbased_ forms (default
//     parentbased_always_on).
//   - OTEL_SERVICE_NAME (default service), OTEL_RESOURCE_ATTRIBUTES.
//   - OTEL_BSP_*: the batch span processor's queue and delays.
func FromEnv(ctx context.Context, getenv func(string) string, stdout io.Writer, service string) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Off(), nil
	}
	names := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if names == "" || names == "none" {
		return Off(), nil
	}
	sampler, err := samplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	if s := getenv("OTEL_SERVICE_NAME"); s != "" {
		service = s
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	batch, err := BatchConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	var exps []SpanExporter
	for _, name := range strings.Split(names, ",") {
		switch name = strings.TrimSpace(name); name {
		case "none":
			continue
		case "otlp":
			exp, err := OTLPFromEnv(getenv)
			if err != nil {
				return nil, err
			}
			exps = append(exps, exp)
		case "console":
			exp, err := stdouttrace.New(stdouttrace.WithWriter(stdout))
			if err != nil {
				return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=console: %w", err)
			}
			exps = append(exps, SDKExporter(exp))
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (want otlp, console or none)", name)
		}
	}
	return New(Config{Sampler: &sampler, Resource: res, Batch: batch}, exps...), nil
}

// Config is the span recorder's setup beside its exporters.
type Config struct {
	// Sampler decides which spans are recorded; nil is
	// ParentBased(AlwaysOn()), OpenTelemetry's default.
	Sampler *Sampler
	// Resource describes the process in every export; nil is
	// resource.Default().
	Resource *resource.Resource
	// Batch is the export queue and its timing.
	Batch BatchConfig
	// Sync exports each span from End, on the caller's goroutine, with no
	// queue: for tests that read an in-memory exporter right after a
	// request.
	Sync bool
}

// New is tracing on: spans recorded by this package's recorder (see
// SpanRecord) and exported in batches to exporters.
func New(cfg Config, exporters ...SpanExporter) *Tracing {
	p := &provider{sampler: ParentBased(AlwaysOn()), res: cfg.Resource, tracers: map[instrumentation.Scope]*recTracer{}}
	if cfg.Sampler != nil {
		p.sampler = *cfg.Sampler
	}
	if p.res == nil {
		p.res = resource.Default()
	}
	p.batch = newBatcher(cfg.Batch, cfg.Sync, exporters)
	return &Tracing{Provider: p, Propagator: propagator, Enabled: true, rec: p}
}

func samplerFromEnv(getenv func(string) string) (Sampler, error) {
	name := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: want a ratio in [0, 1], got %q", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return ParentBased(AlwaysOn()), nil
	case "always_on":
		return AlwaysOn(), nil
	case "always_off":
		return AlwaysOff(), nil
	case "parentbased_always_off":
		return ParentBased(AlwaysOff()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return Sampler{}, err
		}
		if name == "traceidratio" {
			return TraceIDRatio(r), nil
		}
		return ParentBased(TraceIDRatio(r)), nil
	}
	return Sampler{}, fmt.Errorf("OTEL_TRACES_SAMPLER: unknown sampler %q", name)
}
