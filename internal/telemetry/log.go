package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps a slog.Handler so that every line logged with a context
// holding a span (slog's XxxContext methods, or a logger whose lines carry
// one) has the span's trace_id and span_id.
type LogHandler struct{ slog.Handler }

// Handle adds trace_id and span_id when ctx holds a valid span.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the derived handler.
func (h LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the wrapper around the derived handler.
func (h LogHandler) WithGroup(name string) slog.Handler {
	return LogHandler{h.Handler.WithGroup(name)}
}

// ParseLevel reads a log level: debug, info, warn or error (any case), or
// slog's forms such as "info+2"; "" is info. name is the variable or
// setting the value came from, for the error.
func ParseLevel(name, s string) (slog.Level, error) {
	var l slog.Level
	if strings.TrimSpace(s) == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return 0, fmt.Errorf("%s: want debug, info, warn or error, got %q", name, s)
	}
	return l, nil
}

// Limiter lets through at most Burst lines per Every per key, and counts
// what it held back so the next line let through can say how many: a
// flood of refusals leaves a line per interval, not one per request.
type Limiter struct {
	every time.Duration
	burst int

	mu   sync.Mutex
	keys map[string]*window
}

type window struct {
	start      time.Time
	n          int
	suppressed int
}

// NewLimiter lets burst lines per every through for each key. Keys should
// be bounded (a refusal code, never a tenant).
func NewLimiter(every time.Duration, burst int) *Limiter {
	return &Limiter{every: every, burst: burst, keys: map[string]*window{}}
}

// AllowAt reports whether a line for key may be written at now, and how
// many lines for key were held back since the last one let through.
func (l *Limiter) AllowAt(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		w = &window{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= l.every {
		w.start, w.n = now, 0
	}
	if w.n >= l.burst {
		w.suppressed++
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}
