package shards

import (
	"context"
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
