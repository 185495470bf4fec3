// Package reqctx is a request's own context: the one context the server's
// request scope makes for each request (under the request's deadline),
// with room for what the request's middleware learn about it afterwards,
// its server span and its tenant.
//
// Without it, each of them derives a context to carry what it learnt, and
// putting a derived context on the request copies the *http.Request (256
// bytes): a tenant request would pay a context node and a request copy
// for its tenant, and a traced one a span and another copy for its span.
// With it, they fill the room in place: tenant.From and
// trace.SpanFromContext find the tenant and the span in the request's
// context and in every context derived from it, as they would find what
// tenant.With or a tracer's Start had derived.
//
// Concurrency: a Context's room is filled only by the request's own
// goroutine, before the handler runs or starts goroutines of its own; it
// is then read-only and safe for concurrent use, like any context.
package reqctx

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenant"
)

// Context is a request's own context: the context under it, with room
// for the request's server span and its tenant.
type Context struct {
	context.Context
	span   telemetry.SpanRoom
	tenant tenant.Room
}

// New is a request's own context over parent, its room empty.
func New(parent context.Context) *Context { return &Context{Context: parent} }

// Of is ctx as a request's own context, or nil when ctx is not one: a
// context derived from it is not, since only the request's own context
// is filled in place.
func Of(ctx context.Context) *Context {
	c, _ := ctx.(*Context)
	return c
}

// SetTenant puts the request's tenant id in the room: tenant.From finds
// it in c and in every context derived from c, as if c had been derived
// with tenant.With (an empty id: no tenant).
func (c *Context) SetTenant(id string) { c.tenant.Set(id) }

// Extract puts what prop extracts from carrier (a caller's trace
// context, baggage) under c, so the span started next continues the
// caller's trace.
func (c *Context) Extract(prop propagation.TextMapPropagator, carrier propagation.TextMapCarrier) {
	c.Context = prop.Extract(c.Context, carrier)
}

// StartSpan starts the request's span of kind with tracer, a child of
// the span or trace under c, begun at start (now when zero), and makes it
// c's span: trace.SpanFromContext finds it in c and in every context
// derived from c. See telemetry.SpanRoom: the recorder's span is started
// in c's room, with no allocation of its own.
func (c *Context) StartSpan(tracer trace.Tracer, name string, kind trace.SpanKind, start time.Time) trace.Span {
	var s trace.Span
	c.Context, s = c.span.Start(c.Context, tracer, name, kind, start)
	return s
}

// Value answers the keys of the room's span and tenant once set, and
// anything else from the context under c.
func (c *Context) Value(key any) any {
	if v, ok := c.span.Value(key); ok {
		return v
	}
	if v, ok := c.tenant.Value(key); ok {
		return v
	}
	return c.Context.Value(key)
}
