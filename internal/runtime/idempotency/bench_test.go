package idempotency

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkIdempotentRoute is the cost of an Idempotency-Key on a route
// whose handler inserts one row through its accessor's transaction, over
// real HTTP and PostgreSQL, in one run: "plain" sends no key, "new-key" a
// fresh key per request (the claim statement before the handler, then the
// answer stored in the handler's transaction before its commit: two extra
// statements, each one round trip), "replay" the same key again (the claim
// statement only; the handler does not run). Compare the three ns/op.
func BenchmarkIdempotentRoute(b *testing.B) {
	f := newFixture(b, txHandler)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			benchPost(b, f, "", http.StatusCreated)
		}
	})
	// The keys of every run are new: -count reruns the sub-benchmark on
	// the same database, where a repeated key would be a replay.
	fresh := 0
	b.Run("new-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fresh++
			benchPost(b, f, "bench-"+strconv.Itoa(fresh), http.StatusCreated)
		}
	})
	benchPost(b, f, "bench-replay", http.StatusCreated)
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			benchPost(b, f, "bench-replay", http.StatusCreated)
		}
	})
}

func benchPost(b *testing.B, f *fixture, key string, want int) {
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/things", bytes.NewBufferString(`{"note":"b"}`))
	req.Header.Set("X-Tenant-ID", testTenant)
	if key != "" {
		req.Header.Set(Header, key)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != want {
		b.Fatalf("status %d", res.StatusCode)
	}
}
