package pgjobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/jobs"
)

// privatePG is a PostgreSQL cluster of the test's own, so the test can
// crash it (pg_ctl stop -m immediate) without touching the shared server.
type privatePG struct {
	bin, dir string
	port     int
	cred     *syscall.Credential // run its commands as this user (as root: postgres)
}

// startPrivatePG creates a cluster in a temporary directory with the given
// extra server settings and starts it on a free loopback port; it is
// stopped and removed at cleanup. It needs PostgreSQL's server binaries
// (initdb, pg_ctl), as .ci/run installs them with the server.
func startPrivatePG(tb testing.TB, settings ...string) *privatePG {
	tb.Helper()
	p := &privatePG{bin: pgBinDir(tb)}
	dir, err := os.MkdirTemp("", "pgjobs-crash-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	p.dir = dir
	if os.Geteuid() == 0 {
		// initdb refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root needs a postgres user for the private cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	p.run(tb, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	settings = append([]string{fmt.Sprintf("port=%d", p.port), "unix_socket_directories='" + dir + "'", "listen_addresses='127.0.0.1'"}, settings...)
	conf := filepath.Join(dir, "data", "postgresql.auto.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(settings, "\n")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.ctl("stop", "-m", "immediate") })
	p.start(tb)
	return p
}

func (p *privatePG) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *privatePG) start(tb testing.TB) {
	tb.Helper()
	if err := p.ctl("start", "-l", filepath.Join(p.dir, "log")); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		tb.Fatalf("pg_ctl start: %v\n%s", err, log)
	}
}

// crash stops the cluster as a power cut would: no shutdown checkpoint,
// and whatever WAL it has not flushed is lost.
func (p *privatePG) crash(tb testing.TB) {
	tb.Helper()
	if err := p.ctl("stop", "-m", "immediate"); err != nil {
		tb.Fatalf("pg_ctl stop -m immediate: %v", err)
	}
}

func (p *privatePG) ctl(args ...string) error {
	args = append([]string{"-D", filepath.Join(p.dir, "data"), "-w"}, args...)
	cmd := exec.Command(filepath.Join(p.bin, "pg_ctl"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func (p *privatePG) run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// pgBinDir finds the directory of initdb and pg_ctl: on PATH, else where
// pg_config says, else Debian's /usr/lib/postgresql/<version>/bin.
func pgBinDir(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1])
	}
	tb.Fatal("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: apt-get install -y postgresql, as .ci/run does")
	return ""
}

// TestCompletionSurvivesCrash: PostgreSQL crashes (stop -m immediate) just
// after it acknowledged a job's completion, which it commits without
// waiting for the WAL flush, so the crash loses it. Once the database is
// back, the job is completed within 10 s, by the backend writing the
// completion again, and it never runs a second time. The cluster's WAL
// writer sleeps 10 s, so nothing but the backend's confirmation flushes
// the completion before the crash.
func TestCompletionSurvivesCrash(t *testing.T) {
	pg := startPrivatePG(t, "wal_writer_delay=10s", "wal_writer_flush_after=0", "checkpoint_timeout=1h")
	ctx := context.Background()
	if err := Migrate(ctx, pg.dsn()); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, pg.dsn(), "", 4)
	// The backend's connections run with synchronous_commit off, so the
	// claim that takes the completion along (the worker asks for its next
	// job at once) does not flush it either: only the confirmation does.
	pc, err := pgxpool.ParseConfig(pg.dsn())
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	async, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(async.Close)
	var runs atomic.Int32
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		runs.Add(1)
		// A synchronous commit flushes the WAL so far: the job's insert
		// and claim survive the crash, only its completion is at stake.
		return flushWAL(ctx, pool)
	})
	// The first confirmation comes 3 s after the start, after the crash.
	cfg := Config{PollInterval: 50 * time.Millisecond, RescueAfter: time.Hour, CompleteConfirm: 3 * time.Second}
	c, _ := newClient(t, async, cfg, 1, w)
	res, err := c.Enqueue(ctx, plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var s string
		err := pool.QueryRow(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs WHERE id = $1`, int64(res.ID)).Scan(&s)
		if err != nil {
			return err.Error()
		}
		return s
	}
	eventually(t, 10*time.Second, "the job to be completed", func() bool { return state() == "completed:1" })
	pg.crash(t)
	time.Sleep(500 * time.Millisecond)
	pg.start(t)
	restarted := time.Now()

	// What the crash left (the backend may already have written it
	// again): the proof that the WAL writer did not save it is 'running'.
	check := newPool(t, pg.dsn(), "", 1)
	var after string
	_ = check.QueryRow(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs WHERE id = $1`, int64(res.ID)).Scan(&after)
	t.Logf("after the restart the job is %s", after)

	eventually(t, 10*time.Second, "the job to be completed again after the restart", func() bool {
		var s string
		err := check.QueryRow(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs WHERE id = $1`, int64(res.ID)).Scan(&s)
		return err == nil && s == "completed:1"
	})
	t.Logf("completed %v after the restart", time.Since(restarted).Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
}

// TestClaimSurvivesCrash: PostgreSQL crashes (stop -m immediate) while a
// job it handed out runs. The claim waited for its WAL flush, so after
// the restart the job is still 'running' as its first attempt, not back to
// 'available' for another worker to run again, and the completion of the
// run that went on through the crash records it: one run, completed. The
// cluster's WAL writer sleeps 10 s and the handler writes nothing, so only
// the claim's own commit can have flushed it.
func TestClaimSurvivesCrash(t *testing.T) {
	pg := startPrivatePG(t, "wal_writer_delay=10s", "wal_writer_flush_after=0", "checkpoint_timeout=1h")
	ctx := context.Background()
	if err := Migrate(ctx, pg.dsn()); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, pg.dsn(), "", 4)
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		if runs.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil
	})
	c, db := newClient(t, pool, Config{PollInterval: 50 * time.Millisecond, RescueAfter: time.Hour, VacuumEvery: time.Hour}, 2, w)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The maintenance pass at the start is over before the job exists, and
	// the next is 30 s away: its heartbeat (a synchronous commit)
	// does not flush the claim instead.
	if _, err := db.RunMaintenance(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	pg.crash(t)
	time.Sleep(500 * time.Millisecond)
	pg.start(t)

	check := newPool(t, pg.dsn(), "", 1)
	state := func() string {
		var s string
		if err := check.QueryRow(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs WHERE id = $1`, int64(res.ID)).Scan(&s); err != nil {
			return err.Error()
		}
		return s
	}
	if s := state(); s != "running:1" {
		t.Fatalf("after the crash the job is %s, want running:1 (the claim was lost)", s)
	}
	close(release)
	eventually(t, 10*time.Second, "the job to be completed after the restart", func() bool { return state() == "completed:1" })
	time.Sleep(200 * time.Millisecond) // a second worker that got the job would have run it by now
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
}

// TestShutdownLogsUnrecordedCompletions: a job finishes while its database
// is down; the backend keeps retrying its completion, and when the process
// stops before the database is back, the completion it could not record
// is logged with the job's id.
func TestShutdownLogsUnrecordedCompletions(t *testing.T) {
	pg := startPrivatePG(t)
	ctx := context.Background()
	if err := Migrate(ctx, pg.dsn()); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, pg.dsn(), "", 4)
	started, release := make(chan struct{}), make(chan struct{})
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		close(started)
		<-release
		return nil
	})
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	b, err := NewPool(pool, Config{PollInterval: 50 * time.Millisecond}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := jobs.NewClient(ctx, jobs.Config{Workers: 1}, b, w, jobs.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	pg.crash(t)
	close(release)
	eventually(t, 10*time.Second, "the completion to fail", func() bool {
		return strings.Contains(logs.String(), "writing completions failed")
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Stop(sctx); err == nil {
		t.Error("Stop with the database down reported no error")
	}
	want := fmt.Sprintf("ids=[%d]", res.ID)
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "completions not recorded at shutdown") && strings.Contains(line, want) {
			return
		}
	}
	t.Fatalf("no shutdown line naming %s in the log:\n%s", want, logs.String())
}

// TestFailureRecordedAfterRestart: a job fails for good while its database
// is down; the failure is written once the database is back, so the job
// ends 'failed' with its error after one run, not rescued and run again.
func TestFailureRecordedAfterRestart(t *testing.T) {
	pg := startPrivatePG(t)
	ctx := context.Background()
	if err := Migrate(ctx, pg.dsn()); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, pg.dsn(), "", 4)
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		runs.Add(1)
		// The claim survives the crash.
		if err := flushWAL(ctx, pool); err != nil {
			return err
		}
		close(started)
		<-release
		return jobs.Permanent(errors.New("boom"))
	})
	c, _ := newClient(t, pool, Config{PollInterval: 50 * time.Millisecond, RescueAfter: time.Hour}, 1, w)
	res, err := c.Enqueue(ctx, plainArgs{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	pg.crash(t)
	close(release)
	time.Sleep(time.Second)
	pg.start(t)
	eventually(t, 10*time.Second, "the failure to be recorded", func() bool {
		var s, e string
		err := pool.QueryRow(ctx, `SELECT state || ':' || attempt, errors::text FROM cellgate_jobs WHERE id = $1`, int64(res.ID)).Scan(&s, &e)
		return err == nil && s == "failed:1" && strings.Contains(e, "boom")
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
}

// flushWAL commits a transaction that writes WAL, synchronously, so
// PostgreSQL flushes its WAL up to there.
func flushWAL(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'pgjobs_test', '')`)
	return err
}

// syncBuffer is a bytes.Buffer safe for the backend's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLostClaimHandedBack: a claim committed but its answer never arrived
// (the connection died first), so its job is 'running', claimed by this
// process, with no worker. The fetcher hands it back before it claims
// again, and the job runs once, at once, instead of sitting until it is
// rescued. A job another process claimed at the same time is left alone,
// and so is a job this process holds.
func TestLostClaimHandedBack(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, newMigratedDB(t), "", 4)
	var runs atomic.Int32
	w := jobs.NewWorkers()
	jobs.Register(w, func(ctx context.Context, j *jobs.Job[plainArgs]) error {
		runs.Add(1)
		return nil
	})
	// The backend is made but not opened (no Client yet): its fetcher,
	// which owns lostClaims, starts with the Client.
	b, err := NewPool(pool, Config{PollInterval: 50 * time.Millisecond, RescueAfter: time.Hour}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	db := b.Control()
	at := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	var lost, other, held int64
	err = pool.QueryRow(ctx, `
WITH ins AS (
  INSERT INTO cellgate_jobs (kind, queue, args, max_attempts, state, attempt, run_at, created_at, attempted_at, heartbeat_at, claimed_by)
  VALUES ($1, 'default', '{"n":1}', 3, 'running', 1, $2, $2, $2, $2, $3),
         ($1, 'default', '{"n":2}', 3, 'running', 1, $2, $2, $2, $2, 'other/1'),
         ($1, 'default', '{"n":3}', 3, 'running', 1, $2, $2, $2, $2, $3)
  RETURNING id, args->>'n' AS n)
SELECT (SELECT id FROM ins WHERE n = '1'), (SELECT id FROM ins WHERE n = '2'), (SELECT id FROM ins WHERE n = '3')`,
		plainArgs{}.JobSpec().Name, at, db.claimedBy).Scan(&lost, &other, &held)
	if err != nil {
		t.Fatal(err)
	}
	db.lostClaims = []time.Time{at}
	db.running[jobs.JobID(held)] = heldJob{attempt: 1}
	c, err := jobs.NewClient(ctx, jobs.Config{Workers: 1}, b, w, jobs.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Stop(context.Background()) })
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	state := func(id int64) string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT state || ':' || attempt FROM cellgate_jobs WHERE id = $1`, id).Scan(&s); err != nil {
			return err.Error()
		}
		return s
	}
	eventually(t, 10*time.Second, "the lost claim's job to run", func() bool { return state(lost) == "completed:1" })
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if s := state(other); s != "running:1" {
		t.Errorf("another process's job is %s, want running:1", s)
	}
	if s := state(held); s != "running:1" {
		t.Errorf("the job this process holds is %s, want running:1", s)
	}
}
