package jobstest

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// periodicStart is the fake clock's start in the periodic cases: 30 s past
// a minute, so every minute's period is half a minute away.
var periodicStart = time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)

// periodicCounter counts the runs of the periodic kind, across clients.
type periodicCounter struct {
	mu   sync.Mutex
	runs int
}

func (p *periodicCounter) register(w *jobs.Workers) {
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[periodicArgs]) error {
		p.mu.Lock()
		p.runs++
		p.mu.Unlock()
		return nil
	})
}

func (p *periodicCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

func everyMinute(runOnStart bool) jobs.PeriodicJob {
	return jobs.PeriodicJob{Name: "every_minute", Kind: "jobstest_periodic", Args: json.RawMessage(`{"note":"p"}`),
		Every: time.Minute, RunOnStart: runOnStart}
}

// testPeriodic: an entry every minute with run_on_start runs once at
// start, then once per period as the clock moves, never twice; its
// enqueued counter follows. Entries naming an unknown kind or args that do
// not fit the kind are refused by NewClient, naming the entry's field.
func testPeriodic(t *testing.T, h Harness) {
	var pc periodicCounter
	w := jobs.NewWorkers()
	pc.register(w)
	clock := NewFakeClock(periodicStart)
	e := newEnvOpts(t, h, jobs.Config{Workers: 2, Periodic: []jobs.PeriodicJob{everyMinute(true)}}, w, jobs.Options{Clock: clock})
	e.start()
	clock.Advance(0) // an in-process scheduler's first look is a timer due now
	e.eventually("the run on start", func() bool { return pc.count() == 1 })
	const periods = 10
	for k := 1; k <= periods; k++ {
		clock.Advance(time.Minute)
		e.eventually("the run of the next period", func() bool { return pc.count() == k+1 })
	}
	e.never("a period ran twice", func() bool { return pc.count() > periods+1 })
	e.metricIs(periods+1, "cellgate_jobs_periodic_enqueued_total", "entry", "every_minute")
	e.metricIs(0, "cellgate_jobs_periodic_skipped_total", "entry", "every_minute")
	e.lint()

	for _, tc := range []struct {
		p    jobs.PeriodicJob
		want string
	}{
		{jobs.PeriodicJob{Name: "x", Kind: "nope", Every: time.Minute}, "jobs.periodic.x.kind"},
		{jobs.PeriodicJob{Name: "x", Kind: "jobstest_periodic", Args: json.RawMessage(`{"nope":1}`), Every: time.Minute}, "jobs.periodic.x.args"},
		{jobs.PeriodicJob{Name: "x", Kind: "jobstest_periodic", Cron: "61 * * * *"}, "jobs.periodic.x.cron"},
		{jobs.PeriodicJob{Name: "x", Kind: "jobstest_periodic", Cron: "0 3 * * *", TimeZone: "Mars/Olympus"}, "jobs.periodic.x.time_zone"},
	} {
		w := jobs.NewWorkers()
		(&periodicCounter{}).register(w)
		c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 1, Periodic: []jobs.PeriodicJob{tc.p}}, h.NewBackend(t), w, jobs.Options{})
		if err == nil {
			_, _ = c.Stop(context.Background())
			t.Errorf("NewClient with %+v: no error, want one naming %s", tc.p, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want+":") {
			t.Errorf("NewClient with %+v: %v, want an error naming %s", tc.p, err, tc.want)
		}
	}
}

// PeriodicHarness is what RunPeriodicFailover needs of a backend whose
// periodic schedule is shared by several processes (PostgreSQL).
type PeriodicHarness struct {
	// NewBackend returns a new backend over one shared store, as another
	// process would open it; every call of one RunPeriodicFailover gets
	// the same store.
	NewBackend func(t testing.TB) jobs.Backend
	// Leader reports whether b is the one that schedules.
	Leader func(b jobs.Backend) bool
	// Wait bounds each wait; 0 means 15 s.
	Wait time.Duration
}

// RunPeriodicFailover runs two clients (two processes) on one store with
// the same periodic entry, every minute, on one fake clock: over 10
// periods each is enqueued exactly once, while the leader is stopped (as
// if killed: its connection, and so its leadership, goes) after the fifth
// and the other takes over.
func RunPeriodicFailover(t *testing.T, h PeriodicHarness) {
	h.Wait = cmp.Or(h.Wait, 15*time.Second)
	hh := Harness{NewBackend: h.NewBackend, Wait: h.Wait}.withDefaults()
	var pc periodicCounter
	clock := NewFakeClock(periodicStart)
	cfg := jobs.Config{Workers: 1, Periodic: []jobs.PeriodicJob{everyMinute(true)}}
	envs := make([]*env, 2)
	for i := range envs {
		w := jobs.NewWorkers()
		pc.register(w)
		envs[i] = newEnvOpts(t, hh, cfg, w, jobs.Options{Clock: clock})
		envs[i].start()
	}
	e := envs[0]
	e.eventually("the run on start", func() bool { return pc.count() == 1 })
	leader := func() int {
		for i, x := range envs {
			if x != nil && h.Leader(x.b) {
				return i
			}
		}
		return -1
	}
	e.eventually("a leader", func() bool { return leader() >= 0 })
	const periods = 10
	for k := 1; k <= periods; k++ {
		if k == 6 {
			l := leader()
			ctx, cancel := context.WithTimeout(context.Background(), h.Wait)
			if _, err := envs[l].c.Stop(ctx); err != nil {
				t.Fatalf("stopping the leader: %v", err)
			}
			cancel()
			envs[l] = nil
			e = envs[1-l]
			e.eventually("the other process leads", func() bool { return leader() == 1-l })
		}
		clock.Advance(time.Minute)
		e.eventually("the run of the next period", func() bool { return pc.count() == k+1 })
	}
	e.never("a period ran twice", func() bool { return pc.count() > periods+1 })
}
