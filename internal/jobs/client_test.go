package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
)

type pingArgs struct {
	Msg string `json:"msg"`
}

func (pingArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "ping"} }

type onceArgs struct{}

func (onceArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "stray", MaxAttempts: 1} }

type uniqueNoKey struct {
	ID string `json:"id"`
}

func (uniqueNoKey) JobSpec() jobs.KindSpec {
	return jobs.KindSpec{Name: "unique_no_key", UniqueBy: []string{"id"}}
}

// syncBuffer is a log sink safe for the workers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

func stop(t testing.TB, c *jobs.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func TestNewClientClampsLanesWithWarning(t *testing.T) {
	logger, logs := newLogger()
	reg := prometheus.NewRegistry()
	c, err := jobs.NewClient(context.Background(),
		jobs.Config{Workers: 2, Tenants: jobs.TenantConfig{Lanes: 8, LanesPerTenant: 2}},
		local.New(), nil, jobs.Options{Logger: logger, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if got := c.Config().Tenants.Lanes; got != 2 {
		t.Errorf("effective lanes = %d, want 2 (the worker count)", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "jobs.tenants.lanes (8) is more than jobs.workers (2)") {
		t.Errorf("no clamping warning in the log: %s", logs)
	}
	// The lane label has one value per effective lane.
	if n := seriesOf(t, reg, "cellgate_jobs_lane_busy_workers"); n != 2 {
		t.Errorf("lane_busy_workers has %d series, want 2", n)
	}
}

// seriesOf counts the series of one metric family of reg.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// plainBackend is a backend without tenant isolation.
type plainBackend struct{ *local.Backend }

func (plainBackend) Capabilities() jobs.Capabilities { return jobs.Capabilities{} }

func TestNewClientWarnsWhenBackendCannotIsolate(t *testing.T) {
	logger, logs := newLogger()
	c, err := jobs.NewClient(context.Background(), jobs.Config{Tenants: jobs.TenantConfig{MaxConcurrent: 2}},
		plainBackend{local.New()}, nil, jobs.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if !strings.Contains(logs.String(), "no tenant isolation") {
		t.Errorf("no warning for a backend without isolation: %s", logs)
	}
}

func TestNewClientRejects(t *testing.T) {
	ctx := context.Background()
	if _, err := jobs.NewClient(ctx, jobs.Config{Workers: -1}, local.New(), nil, jobs.Options{}); err == nil || !strings.Contains(err.Error(), "jobs.workers") {
		t.Errorf("invalid config: %v", err)
	}
	if _, err := jobs.NewClient(ctx, jobs.Config{}, nil, nil, jobs.Options{}); err == nil {
		t.Error("nil backend accepted")
	}
	reg := prometheus.NewRegistry()
	c, err := jobs.NewClient(ctx, jobs.Config{}, local.New(), nil, jobs.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if _, err := jobs.NewClient(ctx, jobs.Config{}, local.New(), nil, jobs.Options{Registry: reg}); err == nil {
		t.Error("second client on the same registry: want a registration error")
	}
}

func TestRegisterPanics(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil {
				t.Errorf("%s: no panic", name)
				return
			}
			if msg := func() string {
				if e, ok := r.(error); ok {
					return e.Error()
				}
				return r.(string)
			}(); !strings.Contains(msg, want) {
				t.Errorf("%s: panic %q, want it to mention %q", name, msg, want)
			}
		}()
		f()
	}
	h := func(context.Context, *jobs.Job[pingArgs]) error { return nil }
	mustPanic("nil handler", "nil handler", func() { jobs.Register[pingArgs](jobs.NewWorkers(), nil) })
	mustPanic("twice", "registered twice", func() {
		w := jobs.NewWorkers()
		jobs.Register(w, h)
		jobs.Register(w, h)
	})
	mustPanic("unique without UniqueArgs", "UniqueArgs", func() {
		jobs.Register(jobs.NewWorkers(), func(context.Context, *jobs.Job[uniqueNoKey]) error { return nil })
	})
	mustPanic("invalid spec", "kind.name", func() {
		jobs.Register(jobs.NewWorkers(), func(context.Context, *jobs.Job[badSpec]) error { return nil })
	})
	mustPanic("after NewClient", "already used", func() {
		w := jobs.NewWorkers()
		c, err := jobs.NewClient(context.Background(), jobs.Config{}, local.New(), w, jobs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer stop(t, c)
		jobs.Register(w, h)
	})
}

type badSpec struct{}

func (badSpec) JobSpec() jobs.KindSpec { return jobs.KindSpec{MaxAttempts: -1} }

func TestWorkersKinds(t *testing.T) {
	w := jobs.NewWorkers()
	jobs.Register(w, func(context.Context, *jobs.Job[pingArgs]) error { return nil })
	jobs.Register(w, func(context.Context, *jobs.Job[onceArgs]) error { return nil })
	ks := w.Kinds()
	if len(ks) != 2 || ks[0].Name != "ping" || ks[1].Name != "stray" {
		t.Fatalf("Kinds = %+v, want ping then stray", ks)
	}
	if ks[0].Queue != jobs.DefaultQueue || ks[0].MaxAttempts != jobs.DefaultMaxAttempts || ks[1].MaxAttempts != 1 {
		t.Errorf("defaults not applied: %+v", ks)
	}
}

func TestEnqueueUniqueKindWithoutKey(t *testing.T) {
	c, err := jobs.NewClient(context.Background(), jobs.Config{}, local.New(), nil, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if _, err := c.Enqueue(context.Background(), uniqueNoKey{ID: "x"}); err == nil || !strings.Contains(err.Error(), "UniqueArgs") {
		t.Errorf("Enqueue = %v, want an error about UniqueArgs", err)
	}
}

func TestLifecycleErrors(t *testing.T) {
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 1}, local.New(), nil, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	stop(t, c)
	if err := c.Start(context.Background()); !errors.Is(err, jobs.ErrClosed) {
		t.Errorf("Start after Stop = %v, want ErrClosed", err)
	}

	// Stop without Start closes the backend and reports what waited.
	c2, err := jobs.NewClient(context.Background(), jobs.Config{}, local.New(), nil, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Enqueue(context.Background(), pingArgs{}); err != nil {
		t.Fatal(err)
	}
	rep, err := c2.Stop(context.Background())
	if err != nil || rep.Waiting != 1 || len(rep.Abandoned) != 0 {
		t.Errorf("Stop before Start = %+v, %v; want 1 waiting", rep, err)
	}
}

// TestUnregisteredKind: a job no worker knows fails like any other and is
// counted under kind="unknown", so stray kind names cannot grow the labels.
func TestUnregisteredKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := jobs.NewWorkers()
	jobs.Register(w, func(context.Context, *jobs.Job[pingArgs]) error { return nil })
	logger, logs := newLogger()
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 1}, local.New(), w, jobs.Options{Registry: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if _, err := c.Enqueue(context.Background(), onceArgs{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `no worker registered for kind \"stray\"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no failure logged: %s", logs)
		}
		time.Sleep(time.Millisecond)
	}
	want := `
# HELP cellgate_jobs_failed_total Jobs that failed for good (attempts exhausted or a permanent error), by kind.
# TYPE cellgate_jobs_failed_total counter
cellgate_jobs_failed_total{kind="ping"} 0
cellgate_jobs_failed_total{kind="unknown"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cellgate_jobs_failed_total"); err != nil {
		t.Error(err)
	}
}

// TestMetrics checks names, types and labels, and lints every collector.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := jobs.NewWorkers()
	done := make(chan struct{})
	jobs.Register(w, func(context.Context, *jobs.Job[pingArgs]) error { close(done); return nil })
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 2, Tenants: jobs.TenantConfig{Lanes: 2, LanesPerTenant: 1}},
		local.New(), w, jobs.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if _, err := c.Enqueue(context.Background(), pingArgs{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
	want := map[string]string{
		"cellgate_jobs_queue_depth":       "GAUGE:queue",
		"cellgate_jobs_running":           "GAUGE:",
		"cellgate_jobs_completed_total":   "COUNTER:kind",
		"cellgate_jobs_failed_total":      "COUNTER:kind",
		"cellgate_jobs_retried_total":     "COUNTER:kind",
		"cellgate_jobs_snoozed_total":     "COUNTER:kind",
		"cellgate_jobs_lane_busy_workers": "GAUGE:lane",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		labels := ""
		if ms := mf.GetMetric(); len(ms) > 0 {
			for _, lp := range ms[0].GetLabel() {
				labels += lp.GetName()
			}
		}
		got[mf.GetName()] = mf.GetType().String() + ":" + labels
	}
	for name, shape := range want {
		if got[name] != shape {
			t.Errorf("%s: %q, want %q", name, got[name], shape)
		}
	}
	if len(got) != len(want) {
		t.Errorf("metrics %v, want exactly %v", got, want)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestWorkerJobsAndCompleted: the operator view of the workers shows the
// job a worker runs while it runs, and counts completed attempts.
func TestWorkerJobsAndCompleted(t *testing.T) {
	w := jobs.NewWorkers()
	running, release := make(chan struct{}), make(chan struct{})
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[pingArgs]) error {
		running <- struct{}{}
		<-release
		return nil
	})
	c, err := jobs.NewClient(context.Background(), jobs.Config{Workers: 3}, local.New(), w, jobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	if got := c.WorkerJobs(nil); len(got) != 3 || got[0]+got[1]+got[2] != 0 || c.Completed() != 0 {
		t.Fatalf("idle workers = %v, completed %d; want 3 idle, 0", got, c.Completed())
	}
	res, err := c.Enqueue(context.Background(), pingArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-running
	busy := 0
	for _, id := range c.WorkerJobs(make([]jobs.JobID, 0, 3)) {
		if id == res.ID {
			busy++
		} else if id != 0 {
			t.Fatalf("a worker runs job %d, want only %d", id, res.ID)
		}
	}
	if busy != 1 {
		t.Fatalf("%d workers run job %d, want 1", busy, res.ID)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for c.Completed() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.Completed() != 1 {
		t.Fatalf("completed = %d, want 1", c.Completed())
	}
}
