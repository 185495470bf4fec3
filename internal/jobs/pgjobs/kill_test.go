package pgjobs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

type slowArgs struct {
	Key string `json:"key"`
}

func (slowArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "slow", MaxAttempts: 3} }

// The helper process finds its control and shard DSNs in these variables.
const (
	helperControlEnv = "PGJOBS_HELPER_CONTROL_DSN"
	helperShardEnv   = "PGJOBS_HELPER_SHARD_DSN"
)

func helperDatabase() config.Database {
	return config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: helperControlEnv, MaxConns: 3},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: helperShardEnv, MaxConns: 3}},
	}
}

// TestHelperWorkerProcess is not a test: TestWorkerKilledMidJob runs the
// test binary with this test selected and helperControlEnv set, as the
// worker process it kills. It runs a Runtime whose handler announces the
// job on stdout and then blocks forever.
func TestHelperWorkerProcess(t *testing.T) {
	if os.Getenv(helperControlEnv) == "" {
		return // run directly: nothing to do
	}
	set, err := shards.Open(context.Background(), helperDatabase(), os.Getenv)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[slowArgs]) error {
		fmt.Printf("started %d attempt %d\n", j.ID, j.Attempt)
		select {} // until SIGKILL
	})
	r, err := newRuntime(context.Background(), set, Config{ShardLocal: true, PollInterval: 50 * time.Millisecond},
		jobs.Config{Workers: 1}, w, jobs.Options{Logger: quietLogger()})
	if err == nil {
		err = r.Start(context.Background())
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	select {}
}

// TestWorkerKilledMidJob: a worker process dies (SIGKILL) in the middle of
// a job. A new runtime with a short rescue_after rescues the job, runs it
// again and completes it; nothing is lost.
func TestWorkerKilledMidJob(t *testing.T) {
	c := newCell(t, 1, 3)
	ctx := context.Background()
	for _, dsn := range c.dsns {
		if err := Migrate(ctx, dsn); err != nil {
			t.Fatal(err)
		}
	}
	sh := c.set.Shards()[0]

	// Enqueue the job in a shard transaction, with a runtime that runs no
	// workers of its own.
	enq, err := newRuntime(ctx, c.set, Config{ShardLocal: true}, jobs.Config{Workers: 1}, nil, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	enq.Databases()[1].markReady()
	var id jobs.JobID
	tctx := tenant.With(ctx, "acme")
	err = sh.Tx(tctx, func(tx shards.Tx) error {
		res, err := enq.EnqueueTx(tctx, tx, slowArgs{Key: "k"})
		id = res.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enq.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperControlEnv+"="+c.dsns["control"], helperShardEnv+"="+c.dsns["shard-0"])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "started") || strings.HasPrefix(line, "error") {
				started <- line
				return
			}
		}
		close(started)
	}()
	select {
	case line, ok := <-started:
		if want := fmt.Sprintf("started %d attempt 1", id); !ok || line != want {
			t.Fatalf("helper said %q, want %q", line, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the helper process did not start the job")
	}
	if n := count(t, sh.Pool, `SELECT count(*) FROM cellgate_jobs WHERE id = $1 AND state = 'running' AND attempt = 1`, int64(id)); n != 1 {
		t.Fatal("the job is not running in the table while the helper runs it")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true

	// A new runtime rescues the job once its heartbeat is older than
	// rescue_after, and completes it.
	ran := make(chan *jobs.Job[slowArgs], 4)
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[slowArgs]) error {
		ran <- j
		return nil
	})
	r, err := newRuntime(ctx, c.set, Config{ShardLocal: true, RescueAfter: 400 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		jobs.Config{Workers: 1}, w, jobs.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Stop(context.Background()) })
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-ran:
		if j.ID != id || j.Attempt != 2 || j.Tenant != "acme" || j.Args.Key != "k" {
			t.Fatalf("rescued job ran as %+v, want id %d attempt 2 of acme", j, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job of the killed process was not rescued")
	}
	eventually(t, 10*time.Second, "the rescued job to be completed", func() bool {
		return count(t, sh.Pool, `SELECT count(*) FROM cellgate_jobs WHERE id = $1 AND state = 'completed'`, int64(id)) == 1
	})
	js, err := r.Shard("shard-0").List(ctx, ListFilter{})
	if err != nil || len(js) != 1 {
		t.Fatalf("List = %+v, %v", js, err)
	}
	if e := js[0].Errors; len(e) != 1 || e[0].Attempt != 1 || !strings.Contains(e[0].Error, "rescued") {
		t.Errorf("errors of the rescued job = %+v, want one rescue record for attempt 1", e)
	}
	select {
	case j := <-ran:
		t.Errorf("the job ran a third time: %+v", j)
	case <-time.After(200 * time.Millisecond):
	}
}
