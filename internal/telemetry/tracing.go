package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

	sdk *sdktrace.TracerProvider
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

// Shutdown flushes the spans still queued and stops the exporters.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
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
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler), sdktrace.WithResource(res)}
	for _, name := range strings.Split(names, ",") {
		var exp sdktrace.SpanExporter
		switch name = strings.TrimSpace(name); name {
		case "none":
			continue
		case "otlp":
			if exp, err = OTLPFromEnv(getenv); err != nil {
				return nil, err
			}
		case "console":
			if exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout)); err != nil {
				return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=console: %w", err)
			}
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (want otlp, console or none)", name)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return New(opts...), nil
}

// New is tracing on, with the given provider options (tests pass an
// in-memory exporter through sdktrace.WithSyncer).
func New(opts ...sdktrace.TracerProviderOption) *Tracing {
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracing{Provider: tp, Propagator: propagator, Enabled: true, sdk: tp}
}

func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
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
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER: unknown sampler %q", name)
}
