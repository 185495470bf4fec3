package main

import (
	"bytes"
	"strings"
	"testing"
)

// sample is go test -bench output in the shape the admission table reads:
// two runs per benchmark, -cpu=1,2 (no suffix at cpu=1).
const sample = `goos: linux
goarch: amd64
pkg: github.com/cellgate/cellgate/internal/admission
BenchmarkAdmitHotAccount/single           	10000000	       40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/single           	10000000	       44.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/single-2         	10000000	      100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/single-2         	10000000	      120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/single-2         	10000000	      999.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/sharded-2        	10000000	       30.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/sharded-2        	10000000	       34.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAdmitHotAccount/peer-2           	10000000	      200.0 ns/op	       8 B/op	       1 allocs/op
BenchmarkAdmitManyAccounts/sharded-2      	10000000	       50.0 ns/op	       0 B/op	       1 allocs/op
BenchmarkAccountMemory/shards=1-2         	 1000000	      900 ns/op	       600.0 B/account	     700 B/op	       4 allocs/op
BenchmarkAccountMemory/shards=8-2         	 1000000	      900 ns/op	      1500.0 B/account	     700 B/op	       4 allocs/op
BenchmarkAccountMemory/shards=16-2        	 1000000	      900 ns/op	      7000.0 B/account	     700 B/op	       4 allocs/op
PASS
`

func TestAdmissionTable(t *testing.T) {
	var out bytes.Buffer
	code := run("admission", strings.NewReader(sample), &out, false)
	got := out.String()
	if code != 0 {
		t.Fatalf("exit %d without -strict:\n%s", code, got)
	}
	for _, want := range []string{
		// medians: sharded 32, peer 200, single-2 median of {100,120,999} = 120
		"| sharded / peer ns/op, hot account, cpu=2 | 0.160 | ≤ 0.35 | PASS |",
		"| sharded / single ns/op, hot account, cpu=2 | 0.267 | ≤ 0.50 | PASS |",
		// the many-accounts benchmark allocates: the peer's allocation is ignored
		"| max allocs/op over 4 admit benchmarks (AdmitManyAccounts/sharded-2) | 1 | = 0 | MISS |",
		"| retained bytes per account, shards=1 | 600 | ≤ 1024 (1.0 KB) | PASS |",
		"| retained bytes per account, shards=16 | 7000 | ≤ 6656 (6.5 KB) | MISS |",
		"| AdmitHotAccount/single | 1 | 2 | 42.0 | 0 | 0 | – |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if code := run("admission", strings.NewReader(sample), &bytes.Buffer{}, true); code != 1 {
		t.Errorf("-strict with misses: exit %d, want 1", code)
	}
}

func TestMissingAndFailedInputFail(t *testing.T) {
	var out bytes.Buffer
	if code := run("admission", strings.NewReader("BenchmarkAdmitHotAccount/single-2 10 5 ns/op\n"), &out, false); code != 1 {
		t.Fatalf("missing benchmarks: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "MISSING") {
		t.Errorf("missing benchmarks not reported:\n%s", out.String())
	}
	out.Reset()
	failed := sample + "--- FAIL: BenchmarkAdmitHotAccount/single-2\nFAIL\n"
	if code := run("admission", strings.NewReader(failed), &out, false); code != 1 {
		t.Fatalf("failed run: exit %d, want 1", code)
	}
	if _, err := parse(strings.NewReader("BenchmarkX 10 abc ns/op\n")); err == nil {
		t.Error("malformed value accepted")
	}
}

func TestCPUSuffix(t *testing.T) {
	r, err := parse(strings.NewReader("BenchmarkAccountMemory/shards=16 1 2 ns/op\nBenchmarkAccountMemory/shards=16-4 1 3 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.median("BenchmarkAccountMemory/shards=16", 1, "ns/op"); !ok || v != 2 {
		t.Errorf("cpu=1: %v %v", v, ok)
	}
	if v, ok := r.median("BenchmarkAccountMemory/shards=16", 4, "ns/op"); !ok || v != 3 {
		t.Errorf("cpu=4: %v %v", v, ok)
	}
}
