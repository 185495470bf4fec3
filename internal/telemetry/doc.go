// Package telemetry sets up OpenTelemetry tracing for the cell and the
// router from the standard OTEL_* environment variables, and the log
// plumbing that joins logs to traces: a slog handler that writes the trace
// and span ids of the context a line is logged with, the log level from
// the environment, and a rate limit for lines a flood would repeat.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter: then the
// tracer provider is OpenTelemetry's no-op one and Enabled is false, so
// callers skip every span (no allocation, no clock read). Exporters are
// OTLP over HTTP (protobuf, written here on the OTLP protobuf messages so
// that no gRPC module is linked) and the console (stdout, JSON lines).
// Metrics stay on client_golang: nothing here exports metrics.
//
// Concurrency: a Tracing is safe for concurrent use once built; Shutdown is
// called once, at exit. LogHandler and Limiter are safe for concurrent use.
package telemetry
