package shards

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// QueryTracer is pgx's QueryTracer hook making a client span per query
// run inside a traced operation (a request's or a job's span): named by
// the sqlc statement name (the "-- name: X :one" line sqlc puts at the
// top of each query) or else the statement's first word, with the
// database's name. A query with no span around it (the job runtime's
// polling, maintenance) makes none, so background work costs nothing.
//
// It is also pgx's BatchTracer: a batch (SendBatch) is one client span,
// not one per queued query, since the queries travel in one round trip.
// The span is named "BATCH" and the statement name when every query of
// the batch has the same one ("BATCH InsertJob"), and carries the batch
// size (db.operation.batch.size), the distinct statement names in queue
// order (cellgate.db.statements), the rows the queries returned or
// affected, and a "query failed" event per failed query.
type QueryTracer struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue
}

// NewQueryTracer traces the queries of database db with tp.
func NewQueryTracer(tp trace.TracerProvider, db string) *QueryTracer {
	return &QueryTracer{
		tracer: tp.Tracer("github.com/cellgate/cellgate/internal/shards"),
		attrs:  []attribute.KeyValue{attribute.String("db.system.name", "postgresql"), attribute.String("db.namespace", db)},
	}
}

// querySpan marks the span TraceQueryStart made, so TraceQueryEnd never
// ends the caller's span when none was made.
type querySpan struct{}

// TraceQueryStart starts the query's span when ctx holds one.
func (t *QueryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	name, op := StatementName(data.SQL)
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.attrs...),
		trace.WithAttributes(attribute.String("db.operation.name", op), attribute.String("db.query.text", data.SQL)))
	return context.WithValue(ctx, querySpan{}, span)
}

// TraceQueryEnd ends the query's span with its error and row count.
func (t *QueryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(querySpan{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	} else {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
	}
	span.End()
}

// batchSpan is the state of one traced batch, in its context.
type batchSpan struct {
	span trace.Span
	rows int64
}

// batchKey holds a *batchSpan in the context TraceBatchStart returns.
type batchKey struct{}

// TraceBatchStart starts the batch's span when ctx holds one.
func (t *QueryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() || data.Batch == nil {
		return ctx
	}
	names := make([]string, 0, 1)
	for _, q := range data.Batch.QueuedQueries {
		name, _ := StatementName(q.SQL)
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	spanName := "BATCH"
	if len(names) == 1 {
		spanName += " " + names[0]
	}
	ctx, span := t.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.attrs...),
		trace.WithAttributes(attribute.String("db.operation.name", "BATCH"),
			attribute.Int("db.operation.batch.size", data.Batch.Len()),
			attribute.StringSlice("cellgate.db.statements", names)))
	return context.WithValue(ctx, batchKey{}, &batchSpan{span: span})
}

// TraceBatchQuery adds a queued query's rows to the batch's span, or an
// event naming it when it failed.
func (t *QueryTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(batchKey{}).(*batchSpan)
	if !ok {
		return
	}
	if data.Err != nil {
		name, _ := StatementName(data.SQL)
		b.span.AddEvent("query failed", trace.WithAttributes(
			attribute.String("cellgate.db.statement", name), attribute.String("exception.message", data.Err.Error())))
		return
	}
	b.rows += data.CommandTag.RowsAffected()
}

// TraceBatchEnd ends the batch's span with its error and row count.
func (t *QueryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	b, ok := ctx.Value(batchKey{}).(*batchSpan)
	if !ok {
		return
	}
	if data.Err != nil {
		b.span.RecordError(data.Err)
		b.span.SetStatus(codes.Error, data.Err.Error())
	}
	b.span.SetAttributes(attribute.Int64("db.response.returned_rows", b.rows))
	b.span.End()
}

var _ pgx.BatchTracer = (*QueryTracer)(nil)

// StatementName is a query's span name and operation: sqlc's statement
// name and the SQL's first word after the comment lines, or the first
// word twice for a query without the sqlc comment ("BEGIN", "COMMIT").
func StatementName(sql string) (name, op string) {
	rest := strings.TrimSpace(sql)
	for strings.HasPrefix(rest, "--") {
		line, after, _ := strings.Cut(rest, "\n")
		if n, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(line, "--")), "name:"); ok && name == "" {
			if f := strings.Fields(n); len(f) > 0 {
				name = f[0]
			}
		}
		rest = strings.TrimSpace(after)
	}
	op = rest
	if i := strings.IndexAny(op, " \t\n("); i >= 0 {
		op = op[:i]
	}
	op = strings.ToUpper(op)
	if name == "" {
		name = op
	}
	return name, op
}
