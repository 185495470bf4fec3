package console

import (
	"fmt"
	"testing"
)

// TestTopKBounded: a million events over 10,000 tenants keep k entries,
// and the heavy tenants come out on top with counts within their error.
func TestTopKBounded(t *testing.T) {
	tk := NewTopK(16)
	heavy := map[string]uint64{"hog-a": 0, "hog-b": 0, "hog-c": 0}
	for i := range 1_000_000 {
		var ten string
		switch {
		case i%5 == 0:
			ten = "hog-a"
		case i%7 == 0:
			ten = "hog-b"
		case i%11 == 0:
			ten = "hog-c"
		default:
			ten = fmt.Sprintf("t%d", i%10_000)
		}
		if _, ok := heavy[ten]; ok {
			heavy[ten]++
		}
		tk.Add(ten)
	}
	if len(tk.counts.tenants) != 16 {
		t.Fatalf("holds %d tenants, want 16", len(tk.counts.tenants))
	}
	top, total := tk.Top(3)
	if total != 1_000_000 {
		t.Errorf("total = %d", total)
	}
	for i, want := range []string{"hog-a", "hog-b", "hog-c"} {
		got := top[i]
		if got.Tenant != want || got.Count < heavy[want] || got.Count-got.Error > heavy[want] {
			t.Errorf("top[%d] = %+v, want %s with true count %d within [count-error, count]", i, got, want, heavy[want])
		}
	}
}
