package main

import (
	"slices"
	"testing"

	"github.com/cellgate/cellgate/internal/runtime/idempotency"
)

// TestDefaultTablesCarryIdempotencyKeys: the default -tables names the
// runtime's keys table, by the name the runtime creates, only when a route
// is idempotent.
func TestDefaultTablesCarryIdempotencyKeys(t *testing.T) {
	if idempotencyTable != idempotency.Table {
		t.Fatalf("slotmove names %q, the runtime creates %q", idempotencyTable, idempotency.Table)
	}
	if got := defaultTables([]string{"accounts"}, true); !slices.Equal(got, []string{"accounts", idempotency.Table}) {
		t.Fatalf("idempotent: %v", got)
	}
	if got := defaultTables([]string{"accounts"}, false); !slices.Equal(got, []string{"accounts"}) {
		t.Fatalf("none idempotent: %v", got)
	}
}
