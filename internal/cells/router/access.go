package router

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/requestid"
)

// accessWriter is the ResponseWriter a request is served through while
// the access log is on: it notes the status, the bytes of the body, and
// the code of an answer the router wrote itself (a refusal, a cell's
// failure). Unwrap lets ReverseProxy reach the connection (flush, hijack)
// as before. Without the access log no request is wrapped.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	code   string // the problem code of the router's own answer
	cell   string
	slot   int // -1: no tenant, so no slot
	tenant string
}

var accessWriters = sync.Pool{New: func() any { return new(accessWriter) }}

// WriteHeader notes the final status (a 1xx is passed on, not noted).
func (a *accessWriter) WriteHeader(code int) {
	if a.status == 0 && code >= 200 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

// Write counts the body's bytes; a write before WriteHeader is a 200.
func (a *accessWriter) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	n, err := a.ResponseWriter.Write(p)
	a.bytes += int64(n)
	return n, err
}

// Unwrap returns the server's ResponseWriter.
func (a *accessWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// accessOf returns the accessWriter under w (w itself, or what the
// proxy wrapped it in), or nil when the access log is off.
func accessOf(w http.ResponseWriter) *accessWriter {
	for {
		switch x := w.(type) {
		case *accessWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// answered notes on w's access line the problem the router answered
// with itself.
func answered(w http.ResponseWriter, prob *httpguard.Problem) {
	if a := accessOf(w); a != nil {
		a.code = prob.Code
	}
}

// startAccess wraps w for the access log, or returns nil when it is off.
func (p *Proxy) startAccess(w http.ResponseWriter) *accessWriter {
	if p.cfg.AccessLog == nil || p.cfg.AccessLog.Off {
		return nil
	}
	a := accessWriters.Get().(*accessWriter)
	*a = accessWriter{ResponseWriter: w, slot: -1}
	return a
}

// logAccess writes r's access line (when sampled in) and puts a back in
// the pool. It runs deferred, so a request whose client went away (the
// proxy aborts it with a panic) has its line too, with status 499.
func (p *Proxy) logAccess(a *accessWriter, r *http.Request, start time.Time) {
	status := a.status
	if status == 0 {
		switch {
		case r.Context().Err() != nil:
			status = statusClientGone
		case r.Header.Get("Upgrade") != "":
			status = http.StatusSwitchingProtocols // hijacked: ReverseProxy wrote the head itself
		default:
			status = http.StatusOK
		}
	}
	cfg := p.cfg.AccessLog
	if cfg.Writes(status) && p.cfg.Logger.Enabled(context.Background(), cfg.Level) {
		id := a.Header()[requestid.Header]
		if len(id) == 0 {
			id = r.Header[requestid.Header]
		}
		reqID := ""
		if len(id) > 0 {
			reqID = id[0]
		}
		traceID := ""
		if p.tracer != nil {
			if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
				traceID = sc.TraceID().String()
			}
		}
		p.cfg.Logger.LogAttrs(context.Background(), cfg.Level, "request",
			slog.String("method", r.Method), slog.String("cell", a.cell), slog.Int("slot", a.slot),
			slog.Int("status", status), slog.String("code", a.code),
			slog.Float64("duration_seconds", time.Since(start).Seconds()), slog.Int64("bytes", a.bytes),
			slog.String("request_id", reqID), slog.String("trace_id", traceID), slog.String("tenant", a.tenant))
	}
	*a = accessWriter{}
	accessWriters.Put(a)
}
