package jobstest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
)

// testQueuePause: for a backend that implements jobs.QueuePauser, a paused
// queue's waiting jobs are not claimed while other queues run; a job of it
// already running when the pause comes finishes; the queue is listed as
// paused; after a resume its jobs run. Pausing twice and resuming twice
// report no change the second time.
func testQueuePause(t *testing.T, h Harness) {
	var mu sync.Mutex
	ran := map[string]int{}
	w := jobs.NewWorkers()
	var e *env
	first := make(chan struct{})
	var firstOnce sync.Once
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[otherQueueArgs]) error {
		if j.Args.Key == "first" {
			firstOnce.Do(func() { close(first) })
			e.block(ctx)
		}
		mu.Lock()
		ran[j.Queue]++
		mu.Unlock()
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		mu.Lock()
		ran[j.Queue]++
		mu.Unlock()
		return nil
	})
	runs := func(q string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[q]
	}
	e = newEnv(t, h, jobs.Config{Workers: 3}, w)
	p := e.b.(jobs.QueuePauser)
	paused := otherQueueArgs{}.JobSpec().Queue
	running := basicArgs{}.JobSpec().Queue
	running = cmp.Or(running, jobs.DefaultQueue)
	ctx := context.Background()

	// A job of the queue is running when the pause comes: it finishes.
	e.enqueue(ctx, otherQueueArgs{Key: "first"})
	e.start()
	<-first
	if changed, err := p.PauseQueue(ctx, paused); err != nil || !changed {
		t.Fatalf("PauseQueue(%q) = %v, %v; want true, nil", paused, changed, err)
	}
	if changed, err := p.PauseQueue(ctx, paused); err != nil || changed {
		t.Fatalf("PauseQueue(%q) again = %v, %v; want false, nil", paused, changed, err)
	}
	e.unblock()
	e.eventually("the job running at the pause to finish", func() bool { return runs(paused) == 1 })

	for range 3 {
		e.enqueue(ctx, otherQueueArgs{Key: "later"})
		e.enqueue(ctx, basicArgs{Key: "x"})
	}
	e.eventually("the other queue's jobs", func() bool { return runs(running) == 3 })
	e.never("a job of the paused queue ran", func() bool { return runs(paused) > 1 })
	if got, err := p.PausedQueues(ctx); err != nil || !slices.Equal(got, []string{paused}) {
		t.Fatalf("PausedQueues = %v, %v; want [%s]", got, err, paused)
	}
	if changed, err := p.ResumeQueue(ctx, paused); err != nil || !changed {
		t.Fatalf("ResumeQueue(%q) = %v, %v; want true, nil", paused, changed, err)
	}
	if changed, err := p.ResumeQueue(ctx, paused); err != nil || changed {
		t.Fatalf("ResumeQueue(%q) again = %v, %v; want false, nil", paused, changed, err)
	}
	e.eventually("the resumed queue's jobs", func() bool { return runs(paused) == 4 })
	if got, err := p.PausedQueues(ctx); err != nil || len(got) != 0 {
		t.Fatalf("PausedQueues after the resume = %v, %v; want none", got, err)
	}
}
