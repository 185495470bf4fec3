package shards

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cellgate/cellgate/internal/testpg"
)

// TestBatchSpan: a batch sent inside a traced operation is one client
// span (named by its one statement, with its size, statement names and
// rows), a failed queued query is an event and an error status, and a
// batch with no span around it makes none.
func TestBatchSpan(t *testing.T) {
	dsn := testpg.CreateDB(t, "batchspan")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cc.Tracer = NewQueryTracer(tp, cc.Database)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	const insert = "-- name: InsertT :exec\nINSERT INTO t VALUES ($1)"
	const count = "-- name: CountT :one\nSELECT count(*) FROM t"

	// Outside any span: nothing.
	b := &pgx.Batch{}
	b.Queue(insert, 100)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans for an untraced batch", n)
	}

	rctx, parent := tp.Tracer("test").Start(ctx, "request")
	b = &pgx.Batch{}
	for i := range 3 {
		b.Queue(insert, i)
	}
	if err := conn.SendBatch(rctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	b = &pgx.Batch{}
	b.Queue(insert, 4)
	b.Queue(insert, 1) // duplicate key
	b.Queue(count)
	if err := conn.SendBatch(rctx, b).Close(); err == nil {
		t.Fatal("the duplicate went through")
	}
	parent.End()

	spans := exp.GetSpans().Snapshots()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want two batches and the request", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]any {
		m := map[string]any{}
		for _, kv := range s.Attributes() {
			m[string(kv.Key)] = kv.Value.AsInterface()
		}
		return m
	}
	ok, failed := spans[0], spans[1]
	if ok.Name() != "BATCH InsertT" || ok.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q, parent %v", ok.Name(), ok.Parent())
	}
	a := attrs(ok)
	if a["db.operation.batch.size"] != int64(3) || !slices.Equal(a["cellgate.db.statements"].([]string), []string{"InsertT"}) ||
		a["db.response.returned_rows"] != int64(3) || a["db.namespace"] != cc.Database || a["db.operation.name"] != "BATCH" {
		t.Errorf("batch attributes %v", a)
	}
	if ok.Status().Code == codes.Error {
		t.Errorf("ok batch status %v", ok.Status())
	}
	a = attrs(failed)
	if failed.Name() != "BATCH" || a["db.operation.batch.size"] != int64(3) ||
		!slices.Equal(a["cellgate.db.statements"].([]string), []string{"InsertT", "CountT"}) {
		t.Errorf("failed batch %q %v", failed.Name(), a)
	}
	if failed.Status().Code != codes.Error {
		t.Errorf("failed batch status %v", failed.Status())
	}
	var events []string
	for _, e := range failed.Events() {
		if e.Name == "query failed" {
			for _, kv := range e.Attributes {
				if kv.Key == "cellgate.db.statement" {
					events = append(events, kv.Value.AsString())
				}
			}
		}
	}
	if !slices.Contains(events, "InsertT") {
		t.Errorf("failed batch events %v", failed.Events())
	}
}
