package pgjobs

import (
	"context"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/jobstest"
)

// TestConformance runs the backend contract against both claim orders. Each
// backend gets its own schema in one test database.
func TestConformance(t *testing.T) {
	dsn := newDB(t)
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		t.Run(string(mode), func(t *testing.T) {
			jobstest.RunConformance(t, jobstest.Harness{
				NewBackend: func(tb testing.TB) jobs.Backend {
					pool := newSchema(tb, dsn, 4)
					b, err := NewPool(pool, Config{Claim: mode, PollInterval: 50 * time.Millisecond}, Options{Logger: quietLogger()})
					if err != nil {
						tb.Fatal(err)
					}
					tb.Cleanup(func() { _ = b.Close(context.Background()) })
					return b
				},
				Settle: 200 * time.Millisecond,
			})
		})
	}
}
