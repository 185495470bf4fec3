package requestid

import (
	"strings"
	"testing"
)

func TestRequestIDsAreUniqueAndShaped(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		id := New()
		if seen[id] {
			t.Fatalf("duplicate request id %q", id)
		}
		seen[id] = true
		prefix, seq, ok := strings.Cut(id, "-")
		if !ok || len(prefix) != 16 || seq == "" {
			t.Fatalf("malformed request id %q", id)
		}
	}
}

func BenchmarkRequestID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = New()
	}
}
