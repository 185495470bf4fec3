package router

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cellgate/cellgate/internal/telemetry"
)

// serveDirect sends a request through the proxy's handler on the test's
// goroutine, so its access line is written when it returns.
func serveDirect(f *fixture, tenant string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/x/a", nil)
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.p.ServeHTTP(w, req)
	return w
}

// accessLines returns the access lines ("msg":"request") in logs.
func accessLines(t *testing.T, logs *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if l == "" {
			continue
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	logs.Reset()
	return out
}

// TestRouterAccessLog: a line per request, forwarded or refused (with the
// refusal code), naming cell, slot, status, bytes, request id, tenant and,
// with tracing on, the trace id.
func TestRouterAccessLog(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	var logs bytes.Buffer
	f := newFixture(t, ProxyConfig{
		Tracing: telemetry.New(telemetry.Config{Sync: true}, telemetry.SDKExporter(exp)), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		AccessLog: &telemetry.AccessLog{Level: slog.LevelInfo},
	})
	w := serveDirect(f, tenant1)
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	lines := accessLines(t, &logs)
	if len(lines) != 1 {
		t.Fatalf("%d access lines", len(lines))
	}
	m := lines[0]
	spans := exp.GetSpans().Snapshots()
	if m["method"] != "GET" || m["cell"] != "cell-1" || m["status"] != 200.0 || m["code"] != "" || m["tenant"] != tenant1 ||
		m["bytes"] != float64(w.Body.Len()) || m["request_id"] != w.Header().Get("X-Request-ID") || m["request_id"] == "" ||
		len(spans) != 1 || m["trace_id"] != spans[0].SpanContext().TraceID().String() {
		t.Errorf("access line %v (body %d bytes, request id %q)", m, w.Body.Len(), w.Header().Get("X-Request-ID"))
	}
	if s, _ := m["slot"].(float64); s < 0 || s > 8191 {
		t.Errorf("slot %v", m["slot"])
	}
	if _, ok := m["duration_seconds"].(float64); !ok {
		t.Errorf("duration %v", m["duration_seconds"])
	}

	// Refused at the edge, before routing: no cell, no slot.
	w = serveDirect(f, tenant1, "Connection", "X-Tenant-ID")
	lines = accessLines(t, &logs)
	if len(lines) != 1 || lines[0]["status"] != float64(w.Code) || w.Code < 400 || lines[0]["code"] == "" ||
		lines[0]["cell"] != "" || lines[0]["slot"] != -1.0 {
		t.Errorf("edge refusal %d: %v", w.Code, lines)
	}

	// A cell that is down: the request that finds out and the next one
	// are both refused with its code.
	f.cells[1].srv.Close()
	for range 2 {
		if w := serveDirect(f, tenant2); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d", w.Code)
		}
	}
	lines = accessLines(t, &logs)
	if len(lines) != 2 {
		t.Fatalf("%d lines for 2 refusals", len(lines))
	}
	for _, m := range lines {
		if m["status"] != 503.0 || m["code"] != "cell_unavailable" || m["cell"] != "cell-2" || m["tenant"] != tenant2 {
			t.Errorf("refusal line %v", m)
		}
	}
}

// TestRouterAccessLogKnobs: the level and the sample share (a 5xx always
// written), tracing off (no trace id), and no log at all when off.
func TestRouterAccessLogKnobs(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f := newFixture(t, ProxyConfig{Logger: log, AccessLog: &telemetry.AccessLog{Level: slog.LevelDebug}})
	serveDirect(f, tenant1)
	if lines := accessLines(t, &logs); len(lines) != 0 {
		t.Errorf("debug lines on an info logger: %v", lines)
	}

	f = newFixture(t, ProxyConfig{Logger: log, AccessLog: &telemetry.AccessLog{Level: slog.LevelWarn, Sample: 1e-12}})
	serveDirect(f, tenant1)
	f.cells[1].srv.Close()
	serveDirect(f, tenant2)
	lines := accessLines(t, &logs)
	if len(lines) != 1 || lines[0]["status"] != 503.0 || lines[0]["level"] != "WARN" || lines[0]["trace_id"] != "" {
		t.Errorf("sampled lines %v, want only the 503's at WARN without trace id", lines)
	}

	for _, a := range []*telemetry.AccessLog{nil, {Off: true}} {
		f = newFixture(t, ProxyConfig{Logger: log, AccessLog: a})
		serveDirect(f, tenant1)
		if lines := accessLines(t, &logs); len(lines) != 0 {
			t.Errorf("access log %v wrote %v", a, lines)
		}
	}
}
