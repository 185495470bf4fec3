package tests

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/slots"
)

// otlpReceiver is an in-test OTLP/HTTP receiver: it decodes each export
// with the collector's own message type and keeps the spans with the
// service that sent them.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	o := &otlpReceiver{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP export to %s as %s", r.URL.Path, r.Header.Get("Content-Type"))
		}
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("OTLP export: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					svc = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					o.spans = append(o.spans, receivedSpan{svc, s})
				}
			}
		}
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// find returns the spans named name.
func (o *otlpReceiver) find(name string) []receivedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []receivedSpan
	for _, s := range o.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if _, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(kv.Value.GetIntValue(), 10)
			}
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestTraceFromRouterToJob: the router and a cell as real processes, both
// exporting to an in-test OTLP receiver. One sign-up through the router is
// one trace: the router's server span, the cell's server span (its
// child), the PostgreSQL spans of the sign-up's transaction and the
// enqueue (children of the cell's span), and the send_welcome job's span
// (a child of the enqueue), all with one trace id. A request the router
// refuses has a span saying why. The console exporter runs beside OTLP:
// the trace id is in the cell's console spans, its access-log line and
// the worker's log line.
func TestTraceFromRouterToJob(t *testing.T) {
	rcv := newOTLPReceiver(t)
	otel := []string{
		"OTEL_TRACES_EXPORTER=otlp,console", "OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=50", "CELLGATE_TRACE_TENANT=true",
	}
	env := append(cellEnv(t), otel...)
	env = append(env, "OTEL_SERVICE_NAME=cell-1")
	c := startCell(t, env)
	c.waitStatus(t, "/readyz", 200, 60*time.Second)

	// cell-2 is an address nobody listens on: its tenants are refused.
	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: c.url, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: "http://" + freeAddr(t), Slots: []string{"8192-16383"}},
	}})
	addr := freeAddr(t)
	r := startProcess(t, "router", addr, toolBinary(t, "router"),
		append([]string{"CELLGATE_ROUTER_ADDRESS=" + addr, "OTEL_SERVICE_NAME=router"}, otel...),
		"-slotmap", mapFile, "-health-interval", "1h")
	r.waitStatus(t, "/healthz", 200, 10*time.Second)

	tn := tenantsInRange("traced", slots.Range{Lo: 0, Hi: 8191}, 1)[0]
	resp, body := httpCall(t, "POST", r.url+"/signup", tn, `{"email":"t@traced.test","name":"T"}`)
	if resp.StatusCode != 201 {
		t.Fatalf("sign-up via router: %d %s", resp.StatusCode, body)
	}
	refusedTenant := tenantsInRange("refused", slots.Range{Lo: 8192, Hi: 16383}, 1)[0]
	if resp, body := httpCall(t, "GET", r.url+"/account?id=1", refusedTenant, ""); resp.StatusCode != 503 {
		t.Fatalf("tenant of the dead cell: %d %s", resp.StatusCode, body)
	}

	var job receivedSpan
	deadline := time.Now().Add(20 * time.Second)
	for {
		if js := rcv.find("job send_welcome"); len(js) > 0 && len(rcv.find("router GET")) > 0 {
			job = js[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job span and refused router span within 20s; got %d spans", len(rcv.spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
	routerSpans := rcv.find("router POST")
	cellSpans := rcv.find("POST /signup")
	enqueues := rcv.find("enqueue send_welcome")
	if len(routerSpans) != 1 || len(cellSpans) != 1 || len(enqueues) != 1 {
		t.Fatalf("spans: %d router, %d cell, %d enqueue", len(routerSpans), len(cellSpans), len(enqueues))
	}
	rs, cs, es := routerSpans[0], cellSpans[0], enqueues[0]
	trace := rs.TraceId
	for _, s := range []receivedSpan{cs, es, job} {
		if !bytes.Equal(s.TraceId, trace) {
			t.Errorf("%s (%s) is in trace %x, the router's is %x", s.Name, s.service, s.TraceId, trace)
		}
	}
	if rs.service != "router" || cs.service != "cell-1" || job.service != "cell-1" {
		t.Errorf("services: router span from %q, cell span from %q, job span from %q", rs.service, cs.service, job.service)
	}
	if len(rs.ParentSpanId) != 0 || rs.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the router's span is not a root server span: %v", rs.Span)
	}
	if spanAttr(rs.Span, "cellgate.cell") != "cell-1" || spanAttr(rs.Span, "cellgate.tenant") != tn || spanAttr(rs.Span, "cellgate.slot") == "" {
		t.Errorf("router span attributes: %v", rs.Attributes)
	}
	if !bytes.Equal(cs.ParentSpanId, rs.SpanId) || cs.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the cell's span is not the router span's server child: %v", cs.Span)
	}
	if spanAttr(cs.Span, "http.route") != "/signup" || spanAttr(cs.Span, "http.response.status_code") != "201" || spanAttr(cs.Span, "cellgate.tenant") != tn {
		t.Errorf("cell span attributes: %v", cs.Attributes)
	}
	if !bytes.Equal(es.ParentSpanId, cs.SpanId) || es.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("the enqueue is not the cell span's producer child: %v", es.Span)
	}
	if !bytes.Equal(job.ParentSpanId, es.SpanId) || job.Kind != tracepb.Span_SPAN_KIND_CONSUMER ||
		spanAttr(job.Span, "cellgate.job.queue") == "" || spanAttr(job.Span, "cellgate.job.attempt") != "1" {
		t.Errorf("the job span is not the enqueue's consumer child: %v", job.Span)
	}
	// The sign-up transaction's statements: children of the cell's span,
	// on the tenant's shard database.
	var stmts []string
	rcv.mu.Lock()
	for _, s := range rcv.spans {
		if bytes.Equal(s.ParentSpanId, cs.SpanId) && s.Kind == tracepb.Span_SPAN_KIND_CLIENT {
			if spanAttr(s.Span, "db.namespace") == "" || spanAttr(s.Span, "db.system.name") != "postgresql" {
				t.Errorf("query span %s without db.namespace", s.Name)
			}
			stmts = append(stmts, s.Name)
		}
	}
	rcv.mu.Unlock()
	if got := strings.Join(stmts, " "); !strings.Contains(got, "BEGIN") || !strings.Contains(got, "CreateAccount") || !strings.Contains(got, "COMMIT") {
		t.Errorf("query spans of the sign-up: %q, want BEGIN, CreateAccount, COMMIT", got)
	}

	// The refused request: the router's span says why.
	refused := rcv.find("router GET")[0]
	if spanAttr(refused.Span, "cellgate.refusal.code") != "cell_unavailable" || refused.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		len(refused.Events) != 1 || refused.Events[0].Name != "refused" {
		t.Errorf("refused span: %v", refused.Span)
	}

	// Logs: the access-log line and the worker's line carry the trace id;
	// the console exporter printed the cell's spans with it.
	traceID := hex.EncodeToString(trace)
	var access, worker, console bool
	cellRequestID := ""
	for _, line := range strings.Split(c.Logs(), "\n") {
		if !strings.Contains(line, traceID) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch {
		case m["msg"] == "request" && m["route"] == "/signup" && m["trace_id"] == traceID && m["tenant"] == tn && m["status"] == 201.0:
			access = true
			cellRequestID, _ = m["request_id"].(string)
		case m["msg"] == "welcome sent" && m["trace_id"] == traceID && m["kind"] == "send_welcome":
			worker = true
		case m["SpanContext"] != nil:
			console = true
		}
	}
	if !access || !worker || !console {
		t.Errorf("trace %s: access-log line %v, worker line %v, console span %v", traceID, access, worker, console)
	}

	// The router's access-log line of the sign-up joins the cell's by the
	// trace id and the request id it forwarded, and names the cell and
	// slot it chose.
	slot, err := slots.Slot(tn)
	if err != nil {
		t.Fatal(err)
	}
	routerLine := false
	for _, line := range strings.Split(r.Logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "request" || m["trace_id"] != traceID {
			continue
		}
		if m["method"] != "POST" || m["cell"] != "cell-1" || m["status"] != 201.0 || m["tenant"] != tn ||
			m["slot"] != float64(slot) || m["request_id"] == "" || m["request_id"] != cellRequestID {
			t.Errorf("router access line %s: want POST to cell-1, slot %d, 201, tenant %s, request id %q", line, slot, tn, cellRequestID)
		}
		routerLine = true
	}
	if !routerLine {
		t.Errorf("no router access-log line with trace %s:\n%s", traceID, r.Logs())
	}
}
