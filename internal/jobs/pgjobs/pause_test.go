package pgjobs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
)

// heldArgs is a kind whose jobs wait in queue "held".
type heldArgs struct {
	N int `json:"n"`
}

func (heldArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "held", Queue: "held"} }

// queueRuns records, per queue, how many jobs of kinds plain and held ran.
type queueRuns struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *queueRuns) get(q string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[q]
}

func (r *queueRuns) register(w *jobs.Workers) {
	r.n = map[string]int{}
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		r.mu.Lock()
		r.n[j.Queue]++
		r.mu.Unlock()
		return nil
	})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[heldArgs]) error {
		r.mu.Lock()
		r.n[j.Queue]++
		r.mu.Unlock()
		return nil
	})
}

// TestPauseSkipsQueue: fair and FIFO claims, without caps and with a kind
// at its cap (the lookahead path, with a window smaller than the paused
// backlog ahead of the work), never take a paused queue's jobs, older or
// earlier in the fair order than every other job; the other queue's jobs
// run. After a resume the paused backlog runs.
func TestPauseSkipsQueue(t *testing.T) {
	dsn := newDB(t)
	const held = 40
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		for _, capped := range []bool{false, true} {
			name := string(mode)
			if capped {
				name += "-lookahead"
			}
			t.Run(name, func(t *testing.T) {
				pool := newSchema(t, dsn, 4)
				ctx := context.Background()
				var runs queueRuns
				w := jobs.NewWorkers()
				runs.register(w)
				hold := make(chan struct{})
				var cappedStarted atomic.Int32
				if capped {
					registerHeldCapped(w, hold, &cappedStarted)
				}
				cfg := Config{Claim: mode, PollInterval: 20 * time.Millisecond, ClaimBatch: 4, CapLookahead: 8}
				c, b := newClient(t, pool, cfg, 4, w)
				t.Cleanup(func() { close(hold) }) // before the client's Stop
				if changed, err := b.PauseQueue(ctx, "held"); err != nil || !changed {
					t.Fatalf("PauseQueue = %v, %v; want true, nil", changed, err)
				}
				if changed, err := b.PauseQueue(ctx, "held"); err != nil || changed {
					t.Fatalf("PauseQueue again = %v, %v; want false, nil", changed, err)
				}
				// The paused backlog: older than everything (FIFO) and
				// placed first in the fair order.
				if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime)
SELECT 'plain', 'held', 't' || g % 4, '{"n": 1}', 5, now() - interval '1 minute', now(), CASE WHEN $2 THEN g END
FROM generate_series(1, $1) g`, held, mode == ClaimFair); err != nil {
					t.Fatal(err)
				}
				if capped {
					for i := range 2 {
						if _, err := c.Enqueue(ctx, cappedArgs{N: i}); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := c.Start(ctx); err != nil {
					t.Fatal(err)
				}
				if capped {
					// From now on every claim sees the kind at its cap
					// and looks ahead CapLookahead jobs: all of them
					// paused, were the window not to skip them.
					eventually(t, 10*time.Second, "the capped kind at its cap", func() bool { return cappedStarted.Load() == 2 })
				}
				const work = 6
				for i := range work {
					if _, err := c.Enqueue(ctx, plainArgs{N: i}); err != nil {
						t.Fatal(err)
					}
				}
				eventually(t, 10*time.Second, "the running queue's jobs", func() bool { return runs.get("default") == work })
				// A few more polls: claims keep stepping over the backlog.
				time.Sleep(5 * cfg.PollInterval)
				if n := runs.get("held"); n != 0 {
					t.Fatalf("%d jobs of the paused queue ran", n)
				}
				if n := count(t, pool, `SELECT count(*) FROM cellgate_jobs WHERE queue = 'held' AND state = 'available'`); n != held {
					t.Fatalf("%d jobs of the paused queue available, want %d", n, held)
				}
				if got, err := b.PausedQueues(ctx); err != nil || !slices.Equal(got, []string{"held"}) {
					t.Fatalf("PausedQueues = %v, %v", got, err)
				}
				if changed, err := b.ResumeQueue(ctx, "held"); err != nil || !changed {
					t.Fatalf("ResumeQueue = %v, %v; want true, nil", changed, err)
				}
				if changed, err := b.ResumeQueue(ctx, "held"); err != nil || changed {
					t.Fatalf("ResumeQueue again = %v, %v; want false, nil", changed, err)
				}
				eventually(t, 10*time.Second, "the resumed backlog", func() bool { return runs.get("held") == held })
				if got, err := b.PausedQueues(ctx); err != nil || len(got) != 0 {
					t.Fatalf("PausedQueues after resume = %v, %v", got, err)
				}
			})
		}
	}
}

// TestPauseSurvivesRestart: a pause made through one DB and Client
// holds for a new DB and Client on the same database (a restarted
// process), a job of the queue running at the pause finishes, and a
// resume through the new DB lets the queue run.
func TestPauseSurvivesRestart(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx := context.Background()
	cfg := Config{PollInterval: 20 * time.Millisecond}

	// First process: a job of queue "held" is running when the queue is
	// paused; it finishes.
	started, finish := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	w1 := jobs.NewWorkers()
	jobs.Register(w1, func(ctx context.Context, j *jobs.Job[heldArgs]) error {
		close(started)
		<-finish
		finished.Store(true)
		return nil
	})
	c1, b1 := newClient(t, newPool(t, dsn, "", 3), cfg, 1, w1)
	if _, err := c1.Enqueue(ctx, heldArgs{N: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := b1.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	close(finish)
	eventually(t, 10*time.Second, "the running job of the paused queue to finish", finished.Load)
	if _, err := c1.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Second process.
	var runs queueRuns
	w2 := jobs.NewWorkers()
	runs.register(w2)
	c2, b2 := newClient(t, newPool(t, dsn, "", 3), cfg, 2, w2)
	if got, err := b2.PausedQueues(ctx); err != nil || !slices.Equal(got, []string{"held"}) {
		t.Fatalf("PausedQueues after restart = %v, %v", got, err)
	}
	for i := range 3 {
		if _, err := c2.Enqueue(ctx, heldArgs{N: i}); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.Enqueue(ctx, plainArgs{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the running queue's jobs", func() bool { return runs.get("default") == 3 })
	time.Sleep(5 * cfg.PollInterval)
	if n := runs.get("held"); n != 0 {
		t.Fatalf("%d jobs of the queue paused before the restart ran", n)
	}
	if _, err := b2.ResumeQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the resumed queue's jobs", func() bool { return runs.get("held") == 3 })
}

// TestResumeWakesIdleWorkers: a resume made by another process (here a
// DB that runs no workers, as the console's may) wakes an idle
// process at once, though its poll interval is a minute: the resume
// NOTIFYs.
func TestResumeWakesIdleWorkers(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx := context.Background()
	var runs queueRuns
	w := jobs.NewWorkers()
	runs.register(w)
	c, _ := newClient(t, newPool(t, dsn, "", 3), Config{PollInterval: time.Minute}, 2, w)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := NewDB(newPool(t, dsn, "", 2), Config{}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	// Enqueued through the idle process (it finds the job paused), then a
	// job of another queue through a second client on the other process's
	// pool: its NOTIFY reaching the idle process shows it listens.
	oc, _ := newClient(t, newPool(t, dsn, "", 2), Config{}, 1, nil)
	for i := range 5 {
		if _, err := c.Enqueue(ctx, heldArgs{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := oc.Enqueue(ctx, plainArgs{N: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the job notified by the other process", func() bool { return runs.get("default") == 1 })
	time.Sleep(100 * time.Millisecond) // the claims woken by it are done: the process idles
	if n := runs.get("held"); n != 0 {
		t.Fatalf("%d paused jobs ran", n)
	}
	start := time.Now()
	if _, err := other.ResumeQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the resumed jobs in the idle process", func() bool { return runs.get("held") == 5 })
	t.Logf("resumed jobs ran %v after the resume", time.Since(start).Round(time.Millisecond))
}

// TestPauseRefusals: an empty queue name is refused.
func TestPauseRefusals(t *testing.T) {
	b, err := NewDB(newMigratedPool(t, 2), Config{}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PauseQueue(context.Background(), ""); err == nil {
		t.Fatal("PauseQueue(\"\") succeeded")
	}
	if _, err := b.ResumeQueue(context.Background(), ""); err == nil {
		t.Fatal("ResumeQueue(\"\") succeeded")
	}
}

// BenchmarkClaimPausedBacklog measures one claim of 32 jobs, in each claim
// order, with 0, 2,000 and 20,000 ready jobs of a paused queue ahead of
// the jobs it may take (older, spread over the 100 tenants as those are):
// the cost of stepping over a paused backlog, which every claim pays
// while the pause lasts (docs/jobs-postgres.md, "Pausing a queue"). A
// fair claim names 32 tenants, one job each, as the turns of tenants of
// weight 1 do. ms/claim is the statement's wall time seen by this process.
func BenchmarkClaimPausedBacklog(b *testing.B) {
	dsn := newDB(b)
	ctx := context.Background()
	for _, mode := range []ClaimMode{ClaimFair, ClaimFIFO} {
		for _, paused := range []int{0, 2000, 20000} {
			b.Run(fmt.Sprintf("%s/paused=%d", mode, paused), func(b *testing.B) {
				pool := newSchema(b, dsn, 1)
				// The paused backlog first (places 1..paused), then enough
				// runnable jobs for every claim of the run.
				// (As many for each of the 100 tenants: a fair claim
				// names 32 of them in turn.)
				runnable := 100 * (32*(b.N+1)/100 + 2)
				if _, err := pool.Exec(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime)
SELECT 'k', CASE WHEN g <= $1 THEN 'held' ELSE 'default' END, 't' || g % 100, '{}', 5,
       now() - interval '1 hour' + g * interval '1 microsecond', now(), g
FROM generate_series(1, $1::int + $2::int) g`, paused, runnable); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `INSERT INTO cellgate_jobs_paused VALUES ('held', now())`); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `VACUUM ANALYZE cellgate_jobs`); err != nil {
					b.Fatal(err)
				}
				turn := 0
				claim := func() int {
					var rows pgx.Rows
					var err error
					if mode == ClaimFair {
						turns := make([]string, 32)
						for i := range turns {
							turns[i] = fmt.Sprintf("t%d", turn%100)
							turn++
						}
						rows, err = pool.Query(ctx, sqlClaimTurns, time.Now(), 32, turns, []string{}, []int32{}, "bench",
							[]int64{}, []int32{}, int32(64))
					} else {
						rows, err = pool.Query(ctx, sqlClaim, time.Now(), 32, false, []string{}, []int32{}, 256, "bench",
							[]int64{}, []int32{}, int32(64))
					}
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for rows.Next() {
						if v := rows.RawValues(); v[0] != nil { // a job, not a tenant's report
							n++
						}
					}
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					return n
				}
				claim() // plans made, hint bits set
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if n := claim(); n != 32 {
						b.Fatalf("claimed %d jobs, want 32", n)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/claim")
				if n := count(b, pool, `SELECT count(*) FROM cellgate_jobs WHERE queue = 'held' AND state = 'running'`); n != 0 {
					b.Fatalf("%d paused jobs claimed", n)
				}
			})
		}
	}
}
