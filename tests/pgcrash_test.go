package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/testpg"
)

// TestCellSurvivesPostgresCrash runs sign-ups through a real cell from
// several goroutines, crashes its private cluster (pg_ctl stop -m
// immediate) mid-load and restarts it 4 s later: no acknowledged sign-up
// is lost, every acknowledged sign-up's send_welcome job is completed
// within 10 s of the restart, none ran twice (the worker's "welcome sent"
// log line, its side effect, appears once per account), and the first 201
// after the restart is measured (target 2 s).
func TestCellSurvivesPostgresCrash(t *testing.T) {
	// synchronous_commit on: an acknowledged commit must survive the crash
	// (the test cluster's default, off, trades that for speed).
	cl := testpg.StartCluster(t, testpg.ClusterOptions{WALLevel: "replica", Settings: []string{"synchronous_commit = on"}})
	env := cellEnvOn(t, cl.CreateDB)
	c := startCell(t, env)
	c.waitStatus(t, "/readyz", 200, 60*time.Second)

	type ack struct{ tenant, email string }
	var (
		mu        sync.Mutex
		acked     []ack
		restarted atomic.Int64 // unix nanos of the restart, 0 before
		first201  atomic.Int64 // unix nanos of the first 201 after it
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				tn := fmt.Sprintf("crash-%d-%d", g, n%50)
				email := fmt.Sprintf("u%d-%d@crash.test", g, n)
				code := post(client, c.url+"/signup", tn, `{"email":"`+email+`"}`)
				if code != http.StatusCreated {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked = append(acked, ack{tn, email})
				mu.Unlock()
				if r := restarted.Load(); r != 0 {
					first201.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	if err := cl.Crash(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if err := cl.Restart(); err != nil {
		t.Fatal(err)
	}
	restartAt := time.Now()
	restarted.Store(restartAt.UnixNano())
	deadline := time.Now().Add(15 * time.Second)
	for first201.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if first201.Load() == 0 {
		t.Fatal("no 201 within 15 s of the restart")
	}
	firstAfter := time.Duration(first201.Load() - restartAt.UnixNano())
	t.Logf("acknowledged sign-ups: %d; first 201 %s after the restart (target 2s)", len(acked), firstAfter)
	if firstAfter > 2*time.Second {
		t.Errorf("first 201 %s after the restart, want <= 2s", firstAfter)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shards := []string{envValue(env, "CELLGATE_SHARD_0_DSN"), envValue(env, "CELLGATE_SHARD_1_DSN")}
	conns := make([]*pgx.Conn, len(shards))
	for i, dsn := range shards {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		conns[i] = conn
	}
	lost := 0
	var ids []int64
	for _, a := range acked {
		found := false
		for _, conn := range conns {
			var id int64
			err := conn.QueryRow(ctx, "SELECT id FROM accounts WHERE tenant_id = $1 AND email = $2", a.tenant, a.email).Scan(&id)
			if err == nil {
				found = true
				ids = append(ids, id)
				break
			}
		}
		if !found {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged sign-ups lost", lost, len(acked))
	}
	// Every acknowledged sign-up's job completed within 10 s of the restart.
	var pending, retried int
	for time.Since(restartAt) < 10*time.Second {
		pending, retried = 0, 0
		for _, conn := range conns {
			var p, tw int
			if err := conn.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE j.state <> 'completed'), count(*) FILTER (WHERE j.attempt > 1)
FROM accounts a JOIN cellgate_jobs j
  ON j.kind = 'send_welcome' AND j.tenant = a.tenant_id AND (j.args->>'account_id')::bigint = a.id`).Scan(&p, &tw); err != nil {
				t.Fatal(err)
			}
			pending, retried = pending+p, retried+tw
		}
		if pending == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Attempts past the first are retries of attempts the crash failed
	// (the worker's own query); a job that ran to its end twice would have
	// sent its welcome twice.
	sent := map[string]int{}
	for _, line := range strings.Split(c.Logs(), "\n") {
		var l struct {
			Msg       string `json:"msg"`
			Tenant    string `json:"tenant"`
			AccountID int64  `json:"account_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "welcome sent" {
			sent[fmt.Sprintf("%s/%d", l.Tenant, l.AccountID)]++
		}
	}
	twice := 0
	for k, n := range sent {
		if n > 1 {
			twice++
			t.Errorf("welcome of %s sent %d times", k, n)
		}
	}
	t.Logf("10 s after the restart: %d jobs not completed, %d retried, %d welcomes sent, %d sent twice", pending, retried, len(sent), twice)
	if pending > 0 {
		t.Errorf("%d send_welcome jobs not completed 10 s after the restart", pending)
	}
	if len(sent) < len(ids) {
		t.Errorf("%d welcomes sent for %d acknowledged sign-ups", len(sent), len(ids))
	}
}

// post sends a sign-up and returns its status, 0 when the request failed.
func post(client *http.Client, url, tenant, body string) int {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant-ID", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
