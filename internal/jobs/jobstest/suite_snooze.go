package jobstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// testSnooze: a handler returning jobs.Snooze(d) runs again after d with the
// same attempt number, any number of times, within a budget of one attempt.
func testSnooze(t *testing.T, h Harness) {
	const delay = 30 * time.Millisecond
	const snoozes = 4
	at := &attempts{log: map[string][]attemptRec{}}
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[snoozeArgs]) error {
		rec := attemptRec{n: j.Attempt, start: time.Now()}
		defer func() {
			rec.end = time.Now()
			at.add(j.Args.Key, rec)
		}()
		if len(at.get(j.Args.Key)) < snoozes {
			if j.Args.Key == "wrapped" {
				return fmt.Errorf("not ready: %w", jobs.Snooze(delay))
			}
			return jobs.Snooze(delay)
		}
		return nil
	})
	e := newEnv(t, h, jobs.Config{Workers: 2}, w)
	bg := context.Background()
	e.enqueue(bg, snoozeArgs{Key: "plain"})
	e.enqueue(bg, snoozeArgs{Key: "wrapped"})
	e.start()
	e.metricIs(2, "cellgate_jobs_completed_total", "kind", "jobstest_snooze")
	e.metricIs(2*snoozes, "cellgate_jobs_snoozed_total", "kind", "jobstest_snooze")
	for _, key := range []string{"plain", "wrapped"} {
		runs := at.get(key)
		if len(runs) != snoozes+1 {
			t.Fatalf("%s: %d runs, want %d", key, len(runs), snoozes+1)
		}
		for i, r := range runs {
			if r.n != 1 {
				t.Errorf("%s: run %d has attempt %d, want 1 (a snooze is not an attempt)", key, i+1, r.n)
			}
			if i > 0 {
				if gap := r.start.Sub(runs[i-1].end); gap < delay*9/10 {
					t.Errorf("%s: run %d began %s after the snooze, want >= %s", key, i+1, gap, delay)
				}
			}
		}
	}
	e.metricIs(0, "cellgate_jobs_failed_total", "kind", "jobstest_snooze")
	e.metricIs(0, "cellgate_jobs_retried_total", "kind", "jobstest_snooze")
	e.metricIs(0, "cellgate_jobs_queue_depth", "queue", jobs.DefaultQueue)
	e.lint()
}
