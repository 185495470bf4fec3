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

// Room is room for a tenant id in a context that was made with room for
// it (a request's own context, see reqctx): the tenancy middleware sets
// the id there instead of deriving a context with With, which would also
// copy the *http.Request to carry it. The context's Value asks the room
// first; From then finds the id as it finds one With stored.
//
// The zero Room holds no tenant. Set it only before the context is shared
// with another goroutine.
type Room struct {
	// id is the tenant id, boxed once when set: Value returns it as an
	// interface on every lookup.
	id any
}

// Set puts id in the room, replacing what it held; an empty id empties
// it, as With stores nothing for one.
func (r *Room) Set(id string) {
	if id == "" {
		r.id = nil
		return
	}
	r.id = id
}

// Value is what a context holding the room answers for key: the id and
// true when key is From's and the room holds an id, otherwise false, and
// the context asks the context under it.
func (r *Room) Value(key any) (any, bool) {
	if _, ok := key.(ctxKey); ok && r.id != nil {
		return r.id, true
	}
	return nil, false
}
