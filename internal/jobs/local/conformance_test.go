package local_test

import (
	"context"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/jobstest"
	"github.com/cellgate/cellgate/internal/jobs/local"
)

func TestConformance(t *testing.T) {
	jobstest.RunConformance(t, jobstest.Harness{
		NewBackend: func(t testing.TB) jobs.Backend {
			b := local.New()
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			return b
		},
		NewLimitedBackend: func(t testing.TB, l jobs.TenantLimits) jobs.Backend {
			b := local.New(local.WithLimits(l))
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			return b
		},
	})
}
