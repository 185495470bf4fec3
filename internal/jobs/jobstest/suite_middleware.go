package jobstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

// testMiddleware: worker middleware runs in the configured order around the
// handler, on every attempt, and sees the job and its tenant's context.
func testMiddleware(t *testing.T, h Harness) {
	var mu sync.Mutex
	var calls []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
	mw := func(name string) jobs.Middleware {
		return func(next jobs.WorkFunc) jobs.WorkFunc {
			return func(ctx context.Context, job *jobs.JobRow) error {
				tid, _ := tenant.From(ctx)
				record(fmt.Sprintf("%s>%s/%s/%s/%d/%d/%v", name, job.Kind, job.Queue, tid, job.Attempt, job.MaxAttempts, job.ID > 0))
				err := next(ctx, job)
				record(fmt.Sprintf("%s<%v", name, err != nil))
				return err
			}
		}
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[retryArgs]) error {
		record(fmt.Sprintf("handler %d", j.Attempt))
		if j.Attempt < 2 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	e := newEnvOpts(t, h, jobs.Config{Workers: 1, RetryBackoffBase: 10e6, RetryBackoffMax: 20e6}, w,
		jobs.Options{Middleware: []jobs.Middleware{mw("outer"), mw("inner")}})
	e.enqueue(tenant.With(context.Background(), "acme"), retryArgs{Key: "mw"})
	e.start()
	e.metricIs(1, "cellgate_jobs_completed_total", "kind", "jobstest_retry")
	want := []string{
		"outer>jobstest_retry/default/acme/1/3/true", "inner>jobstest_retry/default/acme/1/3/true",
		"handler 1", "inner<true", "outer<true",
		"outer>jobstest_retry/default/acme/2/3/true", "inner>jobstest_retry/default/acme/2/3/true",
		"handler 2", "inner<false", "outer<false",
	}
	e.eventually("both attempts through the chain", func() bool { return len(snapshot()) >= len(want) })
	if got := snapshot(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %q\nwant %q", got, want)
	}
	e.metricIs(1, "cellgate_jobs_retried_total", "kind", "jobstest_retry")

	// A middleware's error is the attempt's outcome.
	w2 := jobs.NewWorkers()
	ran := make(chan struct{}, 1)
	jobs.Register(w2, func(ctx context.Context, j *jobs.Job[retryArgs]) error {
		ran <- struct{}{}
		return nil
	})
	refuse := func(next jobs.WorkFunc) jobs.WorkFunc {
		return func(ctx context.Context, job *jobs.JobRow) error {
			return jobs.Permanent(errors.New("refused by middleware"))
		}
	}
	e2 := newEnvOpts(t, h, jobs.Config{Workers: 1}, w2, jobs.Options{Middleware: []jobs.Middleware{refuse}})
	e2.enqueue(context.Background(), retryArgs{Key: "refused"})
	e2.start()
	e2.metricIs(1, "cellgate_jobs_failed_total", "kind", "jobstest_retry")
	select {
	case <-ran:
		t.Error("the handler ran although the middleware did not call next")
	default:
	}
}

// testInsertMiddleware: insert middleware wraps every enqueue form in order,
// sees the encoded params, and can refuse an insert (nothing is inserted).
func testInsertMiddleware(t *testing.T, h Harness) {
	errRefused := errors.New("refused by insert middleware")
	var mu sync.Mutex
	var calls []string
	mw := func(name string) jobs.InsertMiddleware {
		return func(next jobs.InsertFunc) jobs.InsertFunc {
			return func(ctx context.Context, tx *shards.Tx, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
				mu.Lock()
				calls = append(calls, fmt.Sprintf("%s %d %s", name, len(ps), ps[0].Kind))
				mu.Unlock()
				for _, p := range ps {
					if p.Tenant == "blocked" {
						return nil, errRefused
					}
				}
				return next(ctx, tx, ps)
			}
		}
	}
	w := jobs.NewWorkers()
	var done sync.Map
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		done.Store(j.Args.Key, true)
		return nil
	})
	e := newEnvOpts(t, h, jobs.Config{Workers: 1}, w,
		jobs.Options{InsertMiddleware: []jobs.InsertMiddleware{mw("a"), mw("b")}})
	bg := context.Background()
	e.enqueue(bg, basicArgs{Key: "one"})
	rs, err := e.c.EnqueueMany(bg, []jobs.Args{basicArgs{Key: "m1"}, basicArgs{Key: "m2"}})
	if err != nil || len(rs) != 2 || rs[0].ID <= 0 || rs[1].ID <= 0 || rs[0].ID == rs[1].ID {
		t.Fatalf("EnqueueMany through middleware = %+v, %v", rs, err)
	}
	blocked := tenant.With(bg, "blocked")
	if _, err := e.c.Enqueue(blocked, basicArgs{Key: "refused"}); !errors.Is(err, errRefused) {
		t.Errorf("refused Enqueue: err = %v, want %v", err, errRefused)
	}
	if _, err := e.c.EnqueueMany(blocked, []jobs.Args{basicArgs{Key: "r1"}, basicArgs{Key: "r2"}}); !errors.Is(err, errRefused) {
		t.Errorf("refused EnqueueMany: err = %v, want %v", err, errRefused)
	}
	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	// The outer middleware refuses, so the inner one never sees those.
	want := []string{"a 1 jobstest_basic", "b 1 jobstest_basic", "a 2 jobstest_basic", "b 2 jobstest_basic",
		"a 1 jobstest_basic", "a 2 jobstest_basic"}
	if !slices.Equal(got, want) {
		t.Errorf("insert middleware calls:\n got %q\nwant %q", got, want)
	}
	e.start()
	e.metricIs(3, "cellgate_jobs_completed_total", "kind", "jobstest_basic")
	e.never("a refused job ran", func() bool {
		_, a := done.Load("refused")
		_, b := done.Load("r1")
		_, c := done.Load("r2")
		return a || b || c
	})
	e.metricIs(0, "cellgate_jobs_queue_depth", "queue", jobs.DefaultQueue)
}
