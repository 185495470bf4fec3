package tenant

import (
	"context"
	"testing"
)

func TestWithAndFrom(t *testing.T) {
	ctx := context.Background()
	if _, ok := From(ctx); ok {
		t.Fatal("empty context reported a tenant")
	}
	if got := With(ctx, ""); got != ctx {
		t.Fatal("With(\"\") must return the context unchanged")
	}
	id, ok := From(With(ctx, "acme"))
	if !ok || id != "acme" {
		t.Fatalf("From = %q, %v; want acme, true", id, ok)
	}
}

// roomContext is a context with a Room, as a request's own context has
// one: Value asks the room first.
type roomContext struct {
	context.Context
	room Room
}

func (c *roomContext) Value(key any) any {
	if v, ok := c.room.Value(key); ok {
		return v
	}
	return c.Context.Value(key)
}

// TestRoom: an id set in a context's room is what From finds there and in
// the contexts derived from it; an empty room leaves the lookup to the
// context under it, and an empty id empties the room.
func TestRoom(t *testing.T) {
	type otherKey struct{}
	parent := context.WithValue(With(context.Background(), "outer"), otherKey{}, "v")
	c := &roomContext{Context: parent}
	if id, ok := From(c); !ok || id != "outer" {
		t.Fatalf("empty room: From = %q, %v; want the parent's outer", id, ok)
	}
	c.room.Set("acme")
	derived, cancel := context.WithCancel(c)
	defer cancel()
	for name, ctx := range map[string]context.Context{"room": c, "derived": derived} {
		if id, ok := From(ctx); !ok || id != "acme" {
			t.Errorf("%s: From = %q, %v; want acme, true", name, id, ok)
		}
		if v := ctx.Value(otherKey{}); v != "v" {
			t.Errorf("%s: another key = %v; want the parent's value", name, v)
		}
	}
	c.room.Set("")
	if id, ok := From(c); !ok || id != "outer" {
		t.Fatalf("emptied room: From = %q, %v; want the parent's outer", id, ok)
	}
	if v, ok := (&Room{}).Value(ctxKey{}); ok || v != nil {
		t.Fatalf("zero room answers %v, %v", v, ok)
	}
}
