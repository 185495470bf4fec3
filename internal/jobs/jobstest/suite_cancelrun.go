package jobstest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// testCancelRunning: Client.Cancel of a running job cancels its context
// (cause ErrJobCancelled) promptly, and the job ends failed, not retried,
// though it had attempts left.
func testCancelRunning(t *testing.T, h Harness) {
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[cancelArgs]) error {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	e := newEnv(t, h, jobs.Config{Workers: 2}, w)
	bg := context.Background()
	r := e.enqueue(bg, cancelArgs{Key: "c"})
	e.start()
	select {
	case <-started:
	case <-time.After(e.h.Wait):
		t.Fatal("the job did not start")
	}
	t0 := time.Now()
	if err := e.c.Cancel(bg, r.ID); err != nil {
		t.Fatalf("Cancel of the running job: %v", err)
	}
	select {
	case cause := <-causes:
		t.Logf("cancel reached the running job after %s", time.Since(t0))
		if !errors.Is(cause, jobs.ErrJobCancelled) {
			t.Errorf("the job's context cause = %v, want ErrJobCancelled", cause)
		}
	case <-time.After(e.h.Wait):
		t.Fatal("the running job's context was not cancelled")
	}
	e.metricIs(1, "cellgate_jobs_failed_total", "kind", "jobstest_cancel")
	e.metricIs(0, "cellgate_jobs_retried_total", "kind", "jobstest_cancel")
	e.never("the cancelled job ran again", func() bool { return runs.Load() > 1 })
	if err := e.c.Cancel(bg, r.ID); !errors.Is(err, jobs.ErrNotWaiting) {
		t.Errorf("Cancel of the cancelled job = %v, want ErrNotWaiting", err)
	}
}
