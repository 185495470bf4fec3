// Package telemetry sets up OpenTelemetry tracing for the cell and the
// router from the standard OTEL_* environment variables, and the log
// plumbing that joins logs to traces: a slog handler that writes the trace
// and span ids of the context a line is logged with, the log level from
// the environment, and a rate limit for lines a flood would repeat.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter: then the
// tracer provider is OpenTelemetry's no-op one and Enabled is false, so
// callers skip every span (no allocation, no clock read).
//
// With tracing on, spans are made by this package's recorder behind the
// OpenTelemetry API (trace.TracerProvider, Tracer, Span), so every caller
// instruments with the API as usual. The SDK's span costs more than a
// whole tenant request (docs/observability.md, "Cost of tracing"); the
// recorder keeps an ended span as a plain record taken from a free list,
// hands it to the export goroutine through a lock-free ring, and returns
// it to the free list after export. Samplers keep the SDK's meaning.
// Exporters are OTLP over HTTP (protobuf, encoded here straight from the
// records on the OTLP protobuf messages, so no gRPC module is linked) and
// the console (stdout, JSON lines, through the SDK's stdouttrace).
// Metrics stay on client_golang.
//
// Concurrency: a Tracing is safe for concurrent use once built; Shutdown is
// called once, at exit. LogHandler and Limiter are safe for concurrent use.
package telemetry
