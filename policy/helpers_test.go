package policy

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
)

var shared struct {
	once sync.Once
	e    *Evaluator
	err  error
}

// newEvaluator returns one Evaluator shared by all tests: it is safe for
// concurrent use, and compiling the policy is the slowest step (seconds
// under the race detector).
func newEvaluator(tb testing.TB) *Evaluator {
	tb.Helper()
	shared.once.Do(func() { shared.e, shared.err = New(context.Background()) })
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.e
}

// loadConfig reads a JSON config as the generator would hand it over.
func loadConfig(tb testing.TB, path string) map[string]any {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}
