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
