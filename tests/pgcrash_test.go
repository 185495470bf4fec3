package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/testpg"
)

// Crash test parameters: the scenario (one cell, sign-ups from
// several goroutines, PostgreSQL stopped with -m immediate mid-load and
// started again 4 s later) and its targets.
const (
	crashRuns       = 3
	crashLoaders    = 4
	crashLoadBefore = 2 * time.Second
	crashDowntime   = 4 * time.Second
	crashJobsWithin = 10 * time.Second // every acknowledged sign-up's job completed
	crashFirst201   = 2 * time.Second  // median of the runs' first 201 after the restart
)

// TestCellSurvivesPostgresCrash runs sign-ups through a real cell from
// several goroutines against a private cluster that waits for the WAL
// flush at every commit (fsync, synchronous_commit and full_page_writes
// on, as in production), crashes it (pg_ctl stop -m immediate) mid-load
// and starts it again 4 s later, three times. After each restart: no
// acknowledged sign-up is lost, every sign-up's send_welcome job is
// completed within 10 s, and the first 201 is timed (the median of the
// three runs must be within 2 s; both are timed from the moment the
// server takes connections again). At the end, no job ran twice: the
// worker's side effect, its "welcome sent" log line, appears once per
// account (a job's attempt count would not tell, since an attempt the
// crash failed is retried without having sent anything).
func TestCellSurvivesPostgresCrash(t *testing.T) {
	cl := testpg.StartCluster(t, testpg.ClusterOptions{WALLevel: "replica", Settings: []string{
		"fsync = on", "synchronous_commit = on", "full_page_writes = on",
	}})
	env := cellEnvOn(t, cl.CreateDB)
	c := startCell(t, env)
	c.waitStatus(t, "/readyz", 200, 60*time.Second)
	shards := connectAll(t, envValue(env, "CELLGATE_SHARD_0_DSN"), envValue(env, "CELLGATE_SHARD_1_DSN"))

	load := &signupLoad{url: c.url, client: &http.Client{Timeout: 5 * time.Second}}
	var firsts []time.Duration
	for run := 1; run <= crashRuns; run++ {
		// As a server's periodic checkpoint would, this keeps the WAL the
		// restart replays to about the load's (the first would replay the
		// databases' creation too, 10 s and more on a busy machine).
		checkpoint(t, cl.URL)
		load.start(crashLoaders, run)
		time.Sleep(crashLoadBefore)
		if err := cl.Crash(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(crashDowntime)
		// The restart is the moment the server takes connections again:
		// its recovery (how long depends on the machine's disk, not on the
		// cell) is not counted, and pg_ctl start -w notices readiness
		// only at its next poll.
		restarting := time.Now()
		ready := awaitConnectable(cl.URL)
		if err := cl.Restart(); err != nil {
			t.Fatal(err)
		}
		var restartAt time.Time
		select {
		case restartAt = <-ready:
		case <-time.After(time.Minute):
			t.Fatalf("run %d: the restarted server took no connection within a minute", run)
		}
		first := load.firstOKAfter(restartAt, 15*time.Second)
		time.Sleep(time.Second) // sign-ups after the restart too
		acked := load.stop()
		if first < 0 {
			t.Fatalf("run %d: no 201 within 15 s of the restart", run)
		}
		firsts = append(firsts, first)

		// Reconnect: the crash closed the checker's connections too.
		for _, sh := range shards {
			sh.reconnect(t)
		}
		lost := lostSignups(t, shards, acked)
		pending, retried, doneAfter := waitJobsCompleted(t, shards, restartAt, crashJobsWithin)
		t.Logf("run %d: first 201 %s after the restart (the server's recovery took %s); %d sign-ups acknowledged so far, %d lost; jobs all completed %s after the restart (%d not completed, %d needed another attempt)",
			run, first.Round(time.Millisecond), restartAt.Sub(restarting).Round(time.Millisecond), len(acked), lost, doneAfter.Round(time.Millisecond), pending, retried)
		if lost > 0 {
			t.Errorf("run %d: %d of %d acknowledged sign-ups lost", run, lost, len(acked))
		}
		if pending > 0 {
			t.Errorf("run %d: %d send_welcome jobs not completed %s after the restart", run, pending, crashJobsWithin)
		}
	}

	median := slices.Clone(firsts)
	slices.Sort(median)
	t.Logf("first 201 after the restart: %v, median %s (target %s)", firsts, median[len(median)/2], crashFirst201)
	if median[len(median)/2] > crashFirst201 {
		t.Errorf("median first 201 after the restart %s, want <= %s", median[len(median)/2], crashFirst201)
	}

	accounts := 0
	for _, sh := range shards {
		var n int
		if err := sh.conn.QueryRow(context.Background(), "SELECT count(*) FROM accounts").Scan(&n); err != nil {
			t.Fatal(err)
		}
		accounts += n
	}
	sent := welcomesSent(c.Logs())
	twice := 0
	for k, n := range sent {
		if n > 1 {
			twice++
			t.Errorf("welcome of %s sent %d times", k, n)
		}
	}
	t.Logf("%d accounts, %d welcomes sent, %d sent more than once", accounts, len(sent), twice)
	if len(sent) != accounts {
		t.Errorf("%d accounts got a welcome, want all %d", len(sent), accounts)
	}
}

// signupLoad posts sign-ups from several goroutines and keeps those
// answered 201.
type signupLoad struct {
	url    string
	client *http.Client

	mu    sync.Mutex
	acked []signup
	oks   []time.Time // when each 201 arrived, in order
	quit  atomic.Bool
	wg    sync.WaitGroup
}

type signup struct{ tenant, email string }

// start starts n goroutines posting sign-ups (tenants crash-<run>-<g>-<k>,
// 50 per goroutine) until stop.
func (l *signupLoad) start(n, run int) {
	l.quit.Store(false)
	for g := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; !l.quit.Load(); i++ {
				s := signup{fmt.Sprintf("crash-%d-%d-%d", run, g, i%50), fmt.Sprintf("u%d-%d-%d@crash.test", run, g, i)}
				if postSignup(l.client, l.url, s) != http.StatusCreated {
					time.Sleep(5 * time.Millisecond) // the database is down: no busy loop
					continue
				}
				l.mu.Lock()
				l.acked = append(l.acked, s)
				l.oks = append(l.oks, time.Now())
				l.mu.Unlock()
			}
		}()
	}
}

// stop stops the goroutines and returns every sign-up acknowledged so far.
func (l *signupLoad) stop() []signup {
	l.quit.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// firstOKAfter waits up to within for a 201 that arrived after since and
// returns how long after since it came, or -1.
func (l *signupLoad) firstOKAfter(since time.Time, within time.Duration) time.Duration {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		i, _ := slices.BinarySearchFunc(l.oks, since, func(a, b time.Time) int { return a.Compare(b) })
		var at time.Time
		if i < len(l.oks) {
			at = l.oks[i]
		}
		l.mu.Unlock()
		if !at.IsZero() {
			return at.Sub(since)
		}
	}
	return -1
}

// checkpoint runs CHECKPOINT on the server at url.
func checkpoint(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
}

// awaitConnectable tries to connect to url every 10 ms, from now on, and
// sends the time of the first success; it gives up after a minute (the
// test has failed by then).
func awaitConnectable(url string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn, err := pgx.Connect(ctx, url)
			cancel()
			if err == nil {
				at := time.Now()
				conn.Close(context.Background())
				ch <- at
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return ch
}

// postSignup sends a sign-up and returns its status, 0 when the request
// failed.
func postSignup(client *http.Client, url string, s signup) int {
	req, err := http.NewRequest(http.MethodPost, url+"/signup", strings.NewReader(`{"email":"`+s.email+`"}`))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant-ID", s.tenant)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// shardConn is the checker's connection to one shard.
type shardConn struct {
	dsn  string
	conn *pgx.Conn
}

func connectAll(t *testing.T, dsns ...string) []*shardConn {
	t.Helper()
	out := make([]*shardConn, len(dsns))
	for i, dsn := range dsns {
		out[i] = &shardConn{dsn: dsn}
		out[i].reconnect(t)
	}
	t.Cleanup(func() {
		for _, sh := range out {
			sh.conn.Close(context.Background())
		}
	})
	return out
}

// reconnect replaces the connection (the old one may have died with the
// server), retrying while the restarted server finishes its recovery.
func (sh *shardConn) reconnect(t *testing.T) {
	t.Helper()
	if sh.conn != nil {
		sh.conn.Close(context.Background())
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sh.conn, err = pgx.Connect(ctx, sh.dsn)
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("connect to %s: %v", sh.dsn, err)
}

// lostSignups counts the acknowledged sign-ups that are in no shard.
func lostSignups(t *testing.T, shards []*shardConn, acked []signup) int {
	t.Helper()
	tenants := make([]string, len(acked))
	emails := make([]string, len(acked))
	for i, s := range acked {
		tenants[i], emails[i] = s.tenant, s.email
	}
	found := 0
	for _, sh := range shards {
		var n int
		if err := sh.conn.QueryRow(context.Background(), `
SELECT count(*) FROM accounts a JOIN unnest($1::text[], $2::text[]) AS s(tenant, email)
  ON a.tenant_id = s.tenant AND a.email = s.email`, tenants, emails).Scan(&n); err != nil {
			t.Fatal(err)
		}
		found += n
	}
	return len(acked) - found
}

// waitJobsCompleted polls until every account's send_welcome job is
// completed, at most until restartAt+within. It returns the jobs not
// completed (an account without its job counts too), those that took
// more than one attempt, and when after restartAt the last check ran.
func waitJobsCompleted(t *testing.T, shards []*shardConn, restartAt time.Time, within time.Duration) (pending, retried int, after time.Duration) {
	t.Helper()
	for {
		pending, retried = 0, 0
		for _, sh := range shards {
			var p, r int
			if err := sh.conn.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE j.state IS DISTINCT FROM 'completed'), count(*) FILTER (WHERE j.attempt > 1)
FROM accounts a LEFT JOIN cellgate_jobs j
  ON j.kind = 'send_welcome' AND j.tenant = a.tenant_id AND (j.args->>'account_id')::bigint = a.id`).Scan(&p, &r); err != nil {
				t.Fatal(err)
			}
			pending, retried = pending+p, retried+r
		}
		after = time.Since(restartAt)
		if pending == 0 || after > within {
			return pending, retried, after
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// welcomesSent counts the worker's "welcome sent" log lines per
// tenant/account.
func welcomesSent(logs string) map[string]int {
	sent := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Msg       string `json:"msg"`
			Tenant    string `json:"tenant"`
			AccountID int64  `json:"account_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "welcome sent" {
			sent[fmt.Sprintf("%s/%d", l.Tenant, l.AccountID)]++
		}
	}
	return sent
}
