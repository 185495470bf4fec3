package jobs_test

import (
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
)

func TestNormalizeLimits(t *testing.T) {
	for _, c := range []struct{ mr, w, wantMR, wantW int }{
		{2, 4, 2, 4}, {-1, 0, 0, 1}, {0, 5000, 0, jobs.MaxWeight},
	} {
		if mr, w := jobs.NormalizeLimits(c.mr, c.w); mr != c.wantMR || w != c.wantW {
			t.Errorf("NormalizeLimits(%d, %d) = (%d, %d), want (%d, %d)", c.mr, c.w, mr, w, c.wantMR, c.wantW)
		}
	}
	if mr, w := (jobs.UniformLimits{MaxRunning: 3}).JobLimits("any"); mr != 3 || w != 1 {
		t.Errorf("UniformLimits{3} = (%d, %d), want (3, 1)", mr, w)
	}
}

func TestPriorityValidation(t *testing.T) {
	err := jobs.KindSpec{Name: "k", Priority: 5}.Validate()
	if err == nil || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("KindSpec{Priority: 5}.Validate() = %v, want an error naming priority", err)
	}
	if err := (jobs.KindSpec{Name: "k", Priority: 4}).Validate(); err != nil {
		t.Fatalf("KindSpec{Priority: 4}.Validate() = %v", err)
	}
}
