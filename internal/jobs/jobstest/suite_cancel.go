package jobstest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// testCancel: Client.Cancel keeps waiting jobs (available or scheduled)
// from ever running, frees their uniqueness key, and answers ErrNotWaiting
// for a job that ended, was cancelled already, or does not exist.
func testCancel(t *testing.T, h Harness) {
	var mu sync.Mutex
	ran := map[string]int{}
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		ran[j.Args.Key]++
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[uniqueArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		ran["unique:"+j.Args.Key]++
		return nil
	})
	runs := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[key]
	}
	e := newEnv(t, h, jobs.Config{Workers: 2}, w)
	bg := context.Background()
	now := e.enqueue(bg, basicArgs{Key: "now"})
	later := e.enqueue(bg, basicArgs{Key: "later"}, jobs.RunAt(time.Now().Add(50*time.Millisecond)))
	kept := e.enqueue(bg, basicArgs{Key: "kept"})
	u := e.enqueue(bg, uniqueArgs{Key: "k"})
	for _, id := range []jobs.JobID{now.ID, later.ID, u.ID} {
		if err := e.c.Cancel(bg, id); err != nil {
			t.Fatalf("Cancel(%d): %v", id, err)
		}
	}
	if err := e.c.Cancel(bg, now.ID); !errors.Is(err, jobs.ErrNotWaiting) {
		t.Errorf("second Cancel(%d) = %v, want ErrNotWaiting", now.ID, err)
	}
	if err := e.c.Cancel(bg, kept.ID+1000); !errors.Is(err, jobs.ErrNotWaiting) {
		t.Errorf("Cancel of a job that does not exist = %v, want ErrNotWaiting", err)
	}
	// A cancelled unique job no longer holds its key.
	if r := e.enqueue(bg, uniqueArgs{Key: "k", Extra: 1}); r.Duplicate {
		t.Errorf("enqueue after cancelling the unique job: Duplicate with id %d", r.ID)
	}
	e.start()
	e.eventually("the job not cancelled ran", func() bool { return runs("kept") == 1 && runs("unique:k") == 1 })
	e.never("a cancelled job ran", func() bool { return runs("now") > 0 || runs("later") > 0 })
	// The handler has returned, but a backend may record the completion
	// a moment later (the PostgreSQL one sends it with its next claim):
	// until then the job is running, and Cancel asks its context to end,
	// which changes nothing for a handler that returned nil. Once the
	// completion is recorded Cancel must refuse.
	e.eventually("Cancel of the completed job answers ErrNotWaiting", func() bool {
		return errors.Is(e.c.Cancel(bg, kept.ID), jobs.ErrNotWaiting)
	})
	e.never("the completed job ran again", func() bool { return runs("kept") != 1 })
	e.metricIs(0, "cellgate_jobs_queue_depth", "queue", jobs.DefaultQueue)
}
