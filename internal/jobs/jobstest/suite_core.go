package jobstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/tenant"
)

// seen is what a handler observed about one attempt.
type seen struct {
	job       jobs.Job[basicArgs]
	ctxTenant string
	ctxHas    bool
	at        time.Time
}

func testEnqueue(t *testing.T, h Harness) {
	w := jobs.NewWorkers()
	var e *env
	got := make(chan seen, 32)
	gotOther := make(chan jobs.Job[otherQueueArgs], 4)
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		ct, ok := tenant.From(ctx)
		got <- seen{job: *j, ctxTenant: ct, ctxHas: ok, at: time.Now()}
		if j.Args.Key == "spawn" {
			// A job enqueued by a handler inherits its tenant through ctx.
			if _, err := e.c.Enqueue(ctx, basicArgs{Key: "child"}); err != nil {
				return err
			}
		}
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[otherQueueArgs]) error {
		gotOther <- *j
		return nil
	})
	e = newEnv(t, h, jobs.Config{Workers: 2}, w)
	bg := context.Background()
	acme := tenant.With(bg, "acme")

	full := basicArgs{Key: "full", N: 7, Note: "héllo, \"wörld\" ✓", Tags: []string{"a", "b"}, Nested: &nested{A: map[string]int{"x": 1}}}
	before := time.Now()
	ids := map[string]jobs.JobID{
		"full":   e.enqueue(acme, full).ID,
		"none":   e.enqueue(bg, basicArgs{Key: "none"}).ID,
		"forced": e.enqueue(acme, basicArgs{Key: "forced"}, jobs.WithoutTenant()).ID,
		"spawn":  e.enqueue(acme, basicArgs{Key: "spawn"}).ID,
	}
	otherID := e.enqueue(tenant.With(bg, "zeta"), otherQueueArgs{Key: "q"}).ID
	distinct := map[jobs.JobID]bool{otherID: true}
	for _, id := range ids {
		distinct[id] = true
	}
	if len(distinct) != 5 {
		t.Fatalf("ids not distinct: %v and %d", ids, otherID)
	}
	if _, err := e.c.Enqueue(bg, badArgs{}); err == nil {
		t.Error("Enqueue of a kind with an invalid spec succeeded")
	}
	if _, err := e.c.Enqueue(bg, nil); err == nil {
		t.Error("Enqueue(nil) succeeded")
	}

	// Jobs enqueued before Start run after it.
	e.start()
	byKey := map[string]seen{}
	deadline := time.After(h.Wait)
	for len(byKey) < 5 {
		select {
		case s := <-got:
			if _, dup := byKey[s.job.Args.Key]; dup {
				t.Fatalf("job %q ran twice", s.job.Args.Key)
			}
			byKey[s.job.Args.Key] = s
		case <-deadline:
			t.Fatalf("only %d of 5 jobs ran: %v", len(byKey), byKey)
		}
	}
	f := byKey["full"]
	if !reflect.DeepEqual(f.job.Args, full) {
		t.Errorf("args = %+v, want %+v", f.job.Args, full)
	}
	if f.job.ID != ids["full"] || f.job.Kind != "jobstest_basic" || f.job.Queue != jobs.DefaultQueue ||
		f.job.Attempt != 1 || f.job.MaxAttempts != jobs.DefaultMaxAttempts {
		t.Errorf("job = %+v, want id %d, kind jobstest_basic, queue %s, attempt 1 of %d",
			f.job, ids["full"], jobs.DefaultQueue, jobs.DefaultMaxAttempts)
	}
	if f.job.EnqueuedAt.Before(before.Add(-time.Second)) || f.job.EnqueuedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("EnqueuedAt = %v, want about %v", f.job.EnqueuedAt, before)
	}
	if f.job.Tenant != "acme" || f.ctxTenant != "acme" || !f.ctxHas {
		t.Errorf("tenant: job %q, ctx %q/%v; want acme in both", f.job.Tenant, f.ctxTenant, f.ctxHas)
	}
	for _, k := range []string{"none", "forced"} {
		if s := byKey[k]; s.job.Tenant != "" || s.ctxHas {
			t.Errorf("%s: tenant job %q, ctx %q/%v; want none", k, s.job.Tenant, s.ctxTenant, s.ctxHas)
		}
	}
	if c := byKey["child"]; c.job.Tenant != "acme" || c.ctxTenant != "acme" {
		t.Errorf("child of a job of acme has tenant %q (ctx %q), want acme", c.job.Tenant, c.ctxTenant)
	}
	select {
	case o := <-gotOther:
		if o.ID != otherID || o.Queue != "jobstest_other" || o.Tenant != "zeta" || o.Args.Key != "q" {
			t.Errorf("other-queue job = %+v, want id %d in queue jobstest_other of zeta", o, otherID)
		}
	case <-time.After(h.Wait):
		t.Fatal("the job of the second queue did not run")
	}

	// RunAt holds a job back until its time.
	runAt := time.Now().Add(300 * time.Millisecond)
	later := e.enqueue(bg, basicArgs{Key: "later"}, jobs.RunAt(runAt)).ID
	select {
	case s := <-got:
		if s.job.ID != later {
			t.Fatalf("unexpected job %+v", s.job)
		}
		if s.at.Before(runAt) {
			t.Errorf("job with RunAt %v started early, at %v", runAt, s.at)
		}
	case <-time.After(h.Wait):
		t.Fatal("the job with RunAt never ran")
	}
	e.metricIs(6, "cellgate_jobs_completed_total", "kind", "jobstest_basic") // full, none, forced, spawn, child, later
	e.lint()
}

func testWork(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		cfg  jobs.Config
	}{
		{"FIFO", jobs.Config{Workers: 4}},
		{"Isolated", jobs.Config{Workers: 4, Tenants: jobs.TenantConfig{MaxConcurrent: 2, Lanes: 2, LanesPerTenant: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const producers, perProducer = 4, 50
			tr := newTracker()
			e := newEnv(t, h, tc.cfg, tr.workers(nil))
			e.start()
			var wg sync.WaitGroup
			var enqErr atomic.Value
			for p := range producers {
				wg.Go(func() {
					for i := range perProducer {
						ctx := context.Background()
						if n := (p*perProducer + i) % 11; n < 10 {
							ctx = tenant.With(ctx, fmt.Sprintf("t%d", n))
						}
						if _, err := e.c.Enqueue(ctx, basicArgs{Key: "w", N: i}); err != nil {
							enqErr.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err, _ := enqErr.Load().(error); err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			total := producers * perProducer
			e.eventually(fmt.Sprintf("%d jobs done", total), func() bool { return tr.endedCount() == total })
			e.never("a job ran twice", func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				for _, n := range tr.runs {
					if n != 1 {
						return true
					}
				}
				return len(tr.runs) != total
			})
			e.metricIs(float64(total), "cellgate_jobs_completed_total", "kind", "jobstest_basic")
			e.metricIs(0, "cellgate_jobs_queue_depth", "queue", jobs.DefaultQueue)
			e.metricIs(0, "cellgate_jobs_running")
			for _, name := range []string{"cellgate_jobs_failed_total", "cellgate_jobs_retried_total"} {
				if v, _ := e.metric(name, "kind", "jobstest_basic"); v != 0 {
					t.Errorf("%s = %v, want 0", name, v)
				}
			}
			e.lint()
		})
	}
}

// attempts records the attempts of jobs by key.
type attempts struct {
	mu  sync.Mutex
	log map[string][]attemptRec
}

type attemptRec struct {
	n          int
	start, end time.Time
	ctxErr     error
}

func (a *attempts) add(key string, r attemptRec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log[key] = append(a.log[key], r)
}

// describe lists each key's attempts: number, start and end in ms
// after t0.
func (a *attempts) describe(t0 time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(a.log)) {
		fmt.Fprintf(&b, "%s:", key)
		for _, r := range a.log[key] {
			fmt.Fprintf(&b, " #%d %d–%d", r.n, r.start.Sub(t0).Milliseconds(), r.end.Sub(t0).Milliseconds())
		}
		b.WriteString("; ")
	}
	return b.String()
}

func (a *attempts) get(key string) []attemptRec {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]attemptRec(nil), a.log[key]...)
}

func testRetry(t *testing.T, h Harness) {
	const base = 20 * time.Millisecond
	at := &attempts{log: map[string][]attemptRec{}}
	start := time.Now()
	t.Cleanup(func() {
		if t.Failed() { // where the attempts stalled, for a failure seen only under load
			t.Logf("attempts by key (ms since the start): %s", at.describe(start))
		}
	})
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[retryArgs]) error {
		rec := attemptRec{n: j.Attempt, start: time.Now()}
		defer func() {
			rec.end = time.Now()
			at.add(j.Args.Key, rec)
		}()
		switch j.Args.Key {
		case "twice":
			if j.Attempt < 3 {
				return fmt.Errorf("attempt %d fails", j.Attempt)
			}
		case "always":
			return errors.New("always fails")
		case "panic":
			if j.Attempt == 1 {
				panic("handler panicked")
			}
		case "permanent":
			return jobs.Permanent(errors.New("never retry"))
		}
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[timeoutArgs]) error {
		rec := attemptRec{n: j.Attempt, start: time.Now()}
		defer func() { at.add("timeout", rec) }()
		if j.Attempt == 1 {
			<-ctx.Done() // a well-behaved handler gives up at its deadline
			rec.end = time.Now()
			rec.ctxErr = ctx.Err()
			return ctx.Err()
		}
		rec.end = time.Now()
		return nil
	})
	e := newEnv(t, h, jobs.Config{Workers: 2, RetryBackoffBase: base, RetryBackoffMax: 2 * base}, w)
	bg := context.Background()
	for _, k := range []string{"twice", "always", "panic", "permanent"} {
		e.enqueue(bg, retryArgs{Key: k})
	}
	e.enqueue(bg, timeoutArgs{Key: "slow"})
	e.start()

	e.eventually("3 attempts of twice", func() bool { return len(at.get("twice")) == 3 })
	e.eventually("3 attempts of always", func() bool { return len(at.get("always")) == 3 })
	e.eventually("2 attempts of panic", func() bool { return len(at.get("panic")) == 2 })
	e.eventually("1 attempt of permanent", func() bool { return len(at.get("permanent")) == 1 })
	e.eventually("2 attempts of timeout", func() bool { return len(at.get("timeout")) == 2 })
	e.never("an attempt beyond the budget or after a permanent error", func() bool {
		return len(at.get("always")) > 3 || len(at.get("permanent")) > 1 ||
			len(at.get("twice")) > 3 || len(at.get("panic")) > 2 || len(at.get("timeout")) > 2
	})

	tw := at.get("twice")
	for i, r := range tw {
		if r.n != i+1 {
			t.Errorf("twice: attempt %d numbered %d", i+1, r.n)
		}
	}
	// Equal jitter keeps each delay at least half the exponential step.
	if gap := tw[1].start.Sub(tw[0].end); gap < base/2 {
		t.Errorf("first retry after %s, want >= %s", gap, base/2)
	}
	if gap := tw[2].start.Sub(tw[1].end); gap < base {
		t.Errorf("second retry after %s, want >= %s (backoff doubles)", gap, base)
	}
	to := at.get("timeout")
	if !errors.Is(to[0].ctxErr, context.DeadlineExceeded) {
		t.Errorf("timed-out attempt saw ctx.Err() = %v, want DeadlineExceeded", to[0].ctxErr)
	}
	if d := to[0].end.Sub(to[0].start); d < suiteTimeout*9/10 {
		t.Errorf("timeout fired after %s, want about %s", d, suiteTimeout)
	}

	e.metricIs(2, "cellgate_jobs_completed_total", "kind", "jobstest_retry") // twice, panic
	e.metricIs(5, "cellgate_jobs_retried_total", "kind", "jobstest_retry")   // 2 + 2 + 1
	e.metricIs(2, "cellgate_jobs_failed_total", "kind", "jobstest_retry")    // always, permanent
	e.metricIs(1, "cellgate_jobs_completed_total", "kind", "jobstest_timeout")
	e.metricIs(1, "cellgate_jobs_retried_total", "kind", "jobstest_timeout")
	e.metricIs(0, "cellgate_jobs_queue_depth", "queue", jobs.DefaultQueue)
	e.lint()
}

func testUniqueness(t *testing.T, h Harness) {
	var first atomic.Int64 // id of the job whose first attempt blocks, then fails
	started := make(chan struct{}, 1)
	failFirst := make(chan struct{})
	// releaseRetry lets the retry of the first job end. A retry that
	// comes before the test's enqueue (a loaded machine) finds the job
	// running, which is unique too, never done.
	releaseRetry := make(chan struct{})
	tr := newTracker()
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[uniqueArgs]) error {
		tr.begin(j.ID, group(j.Tenant))
		defer tr.end(j.ID, group(j.Tenant))
		if int64(j.ID) == first.Load() {
			if j.Attempt == 1 {
				started <- struct{}{}
				select {
				case <-failFirst:
				case <-ctx.Done():
				}
				return errors.New("first attempt fails")
			}
			select {
			case <-releaseRetry:
			case <-ctx.Done():
			}
		}
		return nil
	})
	// The retry delay, in [200ms, 400ms), leaves time to enqueue while the
	// job waits for its retry.
	e := newEnv(t, h, jobs.Config{Workers: 2, RetryBackoffBase: 400 * time.Millisecond, RetryBackoffMax: 400 * time.Millisecond}, w)
	bg := context.Background()
	t1 := tenant.With(bg, "t1")

	r1 := e.enqueue(t1, uniqueArgs{Key: "a", Extra: 1})
	if r1.Duplicate {
		t.Fatal("first enqueue reported a duplicate")
	}
	first.Store(int64(r1.ID))
	wantDup := func(state string, ctx context.Context, args uniqueArgs) {
		t.Helper()
		r := e.enqueue(ctx, args)
		if !r.Duplicate || r.ID != r1.ID {
			t.Fatalf("enqueue while the job is %s = %+v, want duplicate of %d", state, r, r1.ID)
		}
	}
	// Fields outside UniqueBy do not matter.
	wantDup("waiting", t1, uniqueArgs{Key: "a", Extra: 2})

	e.start()
	select {
	case <-started:
	case <-time.After(h.Wait):
		t.Fatal("unique job did not start")
	}
	wantDup("running", t1, uniqueArgs{Key: "a", Extra: 3})

	// Another tenant, another key, or no tenant: not duplicates.
	others := []jobs.EnqueueResult{
		e.enqueue(tenant.With(bg, "t2"), uniqueArgs{Key: "a"}),
		e.enqueue(t1, uniqueArgs{Key: "b"}),
		e.enqueue(bg, uniqueArgs{Key: "a"}),
	}
	ids := map[jobs.JobID]bool{r1.ID: true}
	for _, r := range others {
		if r.Duplicate || ids[r.ID] {
			t.Fatalf("enqueue %+v: want a new job (ids so far %v)", r, ids)
		}
		ids[r.ID] = true
	}
	e.eventually("the other unique jobs done", func() bool {
		for _, r := range others {
			if !tr.hasEnded(r.ID) {
				return false
			}
		}
		return true
	})
	e.metricIs(3, "cellgate_jobs_completed_total", "kind", "jobstest_unique")
	e.metricIs(0, "cellgate_jobs_queue_depth", "queue", "jobstest_unique")

	close(failFirst)
	// The job now waits for its retry: the only job in its queue.
	e.metricIs(1, "cellgate_jobs_retried_total", "kind", "jobstest_unique")
	e.metricIs(1, "cellgate_jobs_queue_depth", "queue", "jobstest_unique")
	wantDup("waiting for a retry", t1, uniqueArgs{Key: "a", Extra: 4})
	close(releaseRetry)

	e.metricIs(4, "cellgate_jobs_completed_total", "kind", "jobstest_unique")
	var again jobs.EnqueueResult
	e.eventually("an enqueue after completion inserts a new job", func() bool {
		again = e.enqueue(t1, uniqueArgs{Key: "a", Extra: 5})
		return !again.Duplicate
	})
	if again.ID == r1.ID {
		t.Fatalf("new job reuses id %d", r1.ID)
	}
	e.eventually("the new unique job done", func() bool { return tr.hasEnded(again.ID) })
}

func testKindConcurrency(t *testing.T, h Harness) {
	var cur, peak atomic.Int32
	var free atomic.Int32
	var done atomic.Int32
	w := jobs.NewWorkers()
	var e *env
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[limitedArgs]) error {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		e.block(ctx)
		cur.Add(-1)
		done.Add(1)
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
		free.Add(1)
		e.block(ctx)
		return nil
	})
	e = newEnv(t, h, jobs.Config{Workers: 5}, w)
	bg := context.Background()
	for i := range 6 {
		ctx := bg
		if i%3 != 0 {
			ctx = tenant.With(bg, fmt.Sprintf("t%d", i%3))
		}
		e.enqueue(ctx, limitedArgs{Key: fmt.Sprint(i)})
	}
	e.start()
	e.eventually("2 limited jobs running", func() bool { return cur.Load() == 2 })
	// Other kinds still use the free workers.
	e.enqueue(bg, basicArgs{Key: "x"})
	e.enqueue(bg, basicArgs{Key: "y"})
	e.eventually("2 unlimited jobs running beside the capped kind", func() bool { return free.Load() == 2 })
	e.never("more than 2 jobs of a kind with concurrency 2", func() bool { return cur.Load() > 2 })
	e.unblock()
	e.eventually("all limited jobs done", func() bool { return done.Load() == 6 })
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency of the capped kind = %d, want 2", p)
	}
}

func testShutdown(t *testing.T, h Harness) {
	t.Run("Drain", func(t *testing.T) {
		t.Parallel()
		var finished atomic.Bool
		started := make(chan struct{})
		w := jobs.NewWorkers()
		jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
			close(started)
			time.Sleep(150 * time.Millisecond) // in flight when Stop begins
			finished.Store(true)
			return nil
		})
		e := newEnv(t, h, jobs.Config{Workers: 2}, w)
		e.enqueue(context.Background(), basicArgs{Key: "slow"})
		e.start()
		<-started
		rep, err := e.c.Stop(context.Background())
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if !finished.Load() || len(rep.Abandoned) != 0 {
			t.Errorf("Stop returned %+v with the job finished=%v; want it drained, nothing abandoned", rep, finished.Load())
		}
		e.metricIs(1, "cellgate_jobs_completed_total", "kind", "jobstest_basic")
	})

	t.Run("Deadline", func(t *testing.T) {
		t.Parallel()
		stopping := make(chan struct{})
		ctxCancelled := make(chan struct{})
		var quickDone, queuedRan atomic.Bool
		startedN := make(chan string, 4)
		w := jobs.NewWorkers()
		var e *env
		jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
			startedN <- j.Args.Key
			switch j.Args.Key {
			case "quick":
				<-stopping
				time.Sleep(50 * time.Millisecond)
				quickDone.Store(true)
			case "stuck":
				go func() {
					<-ctx.Done()
					close(ctxCancelled)
				}()
				<-e.release // ignores its context
			default:
				queuedRan.Store(true)
			}
			return nil
		})
		e = newEnv(t, h, jobs.Config{Workers: 2}, w)
		bg := context.Background()
		e.enqueue(bg, basicArgs{Key: "quick"})
		stuck := e.enqueue(bg, basicArgs{Key: "stuck"}).ID
		e.start()
		for range 2 {
			select {
			case <-startedN:
			case <-time.After(h.Wait):
				t.Fatal("jobs did not start")
			}
		}
		e.enqueue(bg, basicArgs{Key: "queued"}) // both workers are busy
		close(stopping)
		ctx, cancel := context.WithTimeout(bg, 400*time.Millisecond)
		defer cancel()
		rep, err := e.c.Stop(ctx)
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if len(rep.Abandoned) != 1 || rep.Abandoned[0] != stuck {
			t.Errorf("abandoned = %v, want [%d]", rep.Abandoned, stuck)
		}
		if rep.Waiting != 1 {
			t.Errorf("report.Waiting = %d, want 1 (the job no worker claimed)", rep.Waiting)
		}
		if !quickDone.Load() {
			t.Error("the job that finished within the deadline was not waited for")
		}
		select {
		case <-ctxCancelled:
		case <-time.After(h.Wait):
			t.Error("the abandoned job's context was not cancelled")
		}
		e.never("a job started after Stop", queuedRan.Load)
		if _, err := e.c.Enqueue(bg, basicArgs{Key: "late"}); !errors.Is(err, jobs.ErrClosed) {
			t.Errorf("Enqueue after Stop: %v, want ErrClosed", err)
		}
		rep2, err := e.c.Stop(bg)
		if err != nil || !reflect.DeepEqual(rep2, rep) {
			t.Errorf("second Stop = %+v, %v; want the first report", rep2, err)
		}
	})

	t.Run("ShutdownTimeout", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{})
		w := jobs.NewWorkers()
		var e *env
		jobs.Register(w, func(ctx context.Context, j *jobs.Job[basicArgs]) error {
			close(started)
			<-e.release
			return nil
		})
		const grace = 150 * time.Millisecond
		e = newEnv(t, h, jobs.Config{Workers: 1, ShutdownTimeout: grace}, w)
		id := e.enqueue(context.Background(), basicArgs{Key: "stuck"}).ID
		e.start()
		<-started
		t0 := time.Now()
		rep, err := e.c.Stop(context.Background()) // no deadline of its own
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if d := time.Since(t0); d < grace || d > h.Wait {
			t.Errorf("Stop took %s, want about %s (Config.ShutdownTimeout)", d, grace)
		}
		if len(rep.Abandoned) != 1 || rep.Abandoned[0] != id {
			t.Errorf("abandoned = %v, want [%d]", rep.Abandoned, id)
		}
	})
}
