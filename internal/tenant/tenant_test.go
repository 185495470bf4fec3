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

func TestScope(t *testing.T) {
	type otherKey struct{}
	type parentKey struct{}
	parent := context.WithValue(context.Background(), parentKey{}, "p")
	s := NewScope(parent)
	if _, ok := From(s); ok {
		t.Fatal("a fresh scope reported a tenant")
	}
	s.SetTenant("")
	if _, ok := From(s); ok {
		t.Fatal("SetTenant(\"\") recorded a tenant")
	}
	s.SetTenant("acme")
	if id, ok := From(s); !ok || id != "acme" {
		t.Fatalf("From(scope) = %q, %v; want acme, true", id, ok)
	}
	if !s.Attach(otherKey{}, 42) || s.Value(otherKey{}) != 42 {
		t.Fatal("attached value not returned")
	}
	if s.Attach(parentKey{}, "shadow") {
		t.Fatal("a second key was attached to a full scope")
	}
	if s.Value(parentKey{}) != "p" {
		t.Fatal("parent value not reached through the scope")
	}
	if got, ok := ScopeOf(s); !ok || got != s {
		t.Fatal("ScopeOf(scope) did not return it")
	}
	if _, ok := ScopeOf(context.WithValue(s, otherKey{}, 1)); ok {
		t.Fatal("ScopeOf returned a scope under another layer")
	}
	// A context derived from the scope sees its values and its cancellation.
	ctx, cancel := context.WithCancel(s)
	defer cancel()
	if id, ok := From(ctx); !ok || id != "acme" || ctx.Value(otherKey{}) != 42 {
		t.Fatal("derived context lost the scope's values")
	}
}
