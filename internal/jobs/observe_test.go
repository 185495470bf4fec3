package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/tenant"
)

type tracedArgs struct{}

func (tracedArgs) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "traced", MaxAttempts: 2}
}

// TestObserveTracesEnqueueToJob: with the local backend, an enqueue inside
// a span is a producer span whose context travels with the job; both
// attempts (a failure, then its retry) are consumer spans of the same
// trace, children of the enqueue; the histograms observe them.
func TestObserveTracesEnqueueToJob(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reg := prometheus.NewRegistry()
	ins, work, err := jobs.Observe(jobs.ObserveConfig{Tracer: tp, Registerer: reg, TraceTenant: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	w := jobs.NewWorkers()
	attempts := 0
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[tracedArgs]) error {
		if attempts++; attempts == 1 {
			return errors.New("first attempt fails")
		}
		close(done)
		return nil
	})
	ctx := context.Background()
	c, err := jobs.NewClient(ctx, jobs.Config{}, local.New(), w, jobs.Options{
		Middleware: []jobs.Middleware{work}, InsertMiddleware: []jobs.InsertMiddleware{ins}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Stop(ctx) }()
	rctx, req := tp.Tracer("test").Start(tenant.With(ctx, "acme"), "request")
	if _, err := c.Enqueue(rctx, tracedArgs{}); err != nil {
		t.Fatal(err)
	}
	req.End()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the retry did not run")
	}
	var enqueue trace.SpanContext
	var jobSpans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(5 * time.Second)
	for len(jobSpans) < 2 && time.Now().Before(deadline) {
		jobSpans = jobSpans[:0]
		for _, s := range exp.GetSpans().Snapshots() {
			switch s.Name() {
			case "enqueue traced":
				enqueue = s.SpanContext()
				if s.Parent().SpanID() != req.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindProducer {
					t.Errorf("enqueue span: parent %v kind %v", s.Parent(), s.SpanKind())
				}
			case "job traced":
				jobSpans = append(jobSpans, s)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(jobSpans) != 2 || !enqueue.IsValid() {
		t.Fatalf("%d job spans, enqueue %v", len(jobSpans), enqueue)
	}
	for i, s := range jobSpans {
		if s.SpanContext().TraceID() != req.SpanContext().TraceID() || s.Parent().SpanID() != enqueue.SpanID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("attempt %d: trace %v parent %v kind %v", i+1, s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind())
		}
	}
	if n := testutil.CollectAndCount(reg, "cellgate_job_duration_seconds", "cellgate_job_wait_seconds"); n != 2 {
		t.Errorf("%d series", n)
	}
	if problems, err := testutil.CollectAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}
