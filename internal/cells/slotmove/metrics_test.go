package slotmove

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsFile: the textfile holds the report's figures under their
// names and passes the linter.
func TestMetricsFile(t *testing.T) {
	rep := Report{
		Copied:   map[string]int64{"accounts": 4, "orders": 1000},
		Deleted:  map[string]int64{"accounts": 4, "orders": 990},
		Verified: map[string]int64{"orders": 1000},
		CopyTime: 2 * time.Second, Streamed: 77, PeakLagBytes: 4096, PeakLag: 150 * time.Millisecond,
		Freeze:       300 * time.Millisecond,
		FreezeSteps:  []FreezeStep{{"map", time.Millisecond}, {"routers", 60 * time.Millisecond}, {"fence", 5 * time.Millisecond}},
		JobsMoved:    3,
		TenantsMoved: 2,
	}
	at := time.Unix(1_800_000_000, 0)
	problems, err := testutil.GatherAndLint(MetricsRegistry(rep, true, at))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}

	path := filepath.Join(t.TempDir(), "slotmove.prom")
	if err := WriteMetricsFile(path, rep, false, at); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, line := range []string{
		`cellgate_slotmove_rows_copied_total{table="orders"} 1000`,
		`cellgate_slotmove_rows_deleted_total{table="orders"} 990`,
		`cellgate_slotmove_changes_streamed_total 77`,
		`cellgate_slotmove_peak_lag_bytes 4096`,
		`cellgate_slotmove_peak_lag_seconds 0.15`,
		`cellgate_slotmove_freeze_seconds 0.3`,
		`cellgate_slotmove_freeze_step_seconds{step="routers"} 0.06`,
		`cellgate_slotmove_copy_duration_seconds 2`,
		`cellgate_slotmove_jobs_moved_total 3`,
		`cellgate_slotmove_tenant_rows_moved_total 2`,
		`cellgate_slotmove_last_run_success 0`,
		`cellgate_slotmove_last_run_timestamp_seconds 1.8e+09`,
	} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("the file lacks the line %q:\n%s", line, text)
		}
	}
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "cellgate_slotmove_") {
			t.Errorf("metric line without the cellgate_slotmove_ prefix: %q", line)
		}
	}
}
