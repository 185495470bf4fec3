// Package tenant carries the current tenant id through a context.Context.
//
// It is the one place where the tenancy middleware (which finds the tenant of a
// request) meets the code that needs it later: the job runtime stamps enqueued
// jobs with it and hands it to their workers, the bulkheads count by it.
// The package holds no state and is safe for concurrent use.
package tenant

import "context"

// ctxKey is unexported so no other package can collide with or forge the key.
type ctxKey struct{}

// With returns a copy of ctx that carries tenant id. An empty id means "no
// tenant" and yields ctx unchanged, so callers never store a meaningless value.
func With(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the tenant id carried by ctx, and whether there was one.
func From(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ctxKey{}).(string)
	return id, ok && id != ""
}
