package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The testhooks build of cmd/server, made once for the tests that need it.
var (
	hooksBinOnce sync.Once
	hooksBin     string
	hooksBinErr  error
)

// stallAfterCommit mirrors internal/runtime/idempotency's testhooks-only
// StallAfterCommitEnv and StalledAfterCommit (they exist only in a
// testhooks build, so they cannot be imported here).
const (
	stallAfterCommitEnv = "CELLGATE_TESTHOOK_STALL_AFTER_COMMIT"
	stalledAfterCommit  = "testhook: idempotent answer committed, not written; stalling"
)

// testhooksServer builds cmd/server with -tags testhooks: the one build
// in which CELLGATE_TESTHOOK_STALL_AFTER_COMMIT does anything.
func testhooksServer(t *testing.T) string {
	t.Helper()
	hooksBinOnce.Do(func() {
		hooksBin = filepath.Join(filepath.Dir(serverBin), "server-testhooks")
		build := exec.Command("go", "build", "-tags", "testhooks", "-o", hooksBin, "../cmd/server")
		out, err := build.CombinedOutput()
		if err != nil {
			hooksBinErr = fmt.Errorf("go build -tags testhooks ../cmd/server: %v\n%s", err, out)
		}
	})
	if hooksBinErr != nil {
		t.Fatal(hooksBinErr)
	}
	return hooksBin
}

// orderRows counts the tenant's orders and its done keys on both shards.
func orderRows(t *testing.T, env []string, tenant, key string) (orders, doneKeys int, storedBody string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"CELLGATE_SHARD_0_DSN", "CELLGATE_SHARD_1_DSN"} {
		conn, err := pgx.Connect(ctx, envValue(env, name))
		if err != nil {
			t.Fatal(err)
		}
		var o, k int
		var body []byte
		err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE tenant_id = $1),
			(SELECT count(*) FROM cellgate_idempotency_keys WHERE tenant_id = $1 AND idem_key = $2 AND state = 'done'),
			(SELECT body FROM cellgate_idempotency_keys WHERE tenant_id = $1 AND idem_key = $2)`, tenant, key).Scan(&o, &k, &body)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		orders, doneKeys, storedBody = orders+o, doneKeys+k, storedBody+string(body)
	}
	return orders, doneKeys, storedBody
}

// TestIdempotentRetryAfterCellKilledBetweenCommitAndAnswer: a cell is
// killed with SIGKILL after POST /orders committed its order and stored
// answer but before it wrote the answer (the testhooks build stops the
// request exactly there and says so). The client gets no answer. A new
// cell process on the same databases answers the retry with the same key
// with the committed answer, Idempotent-Replayed: true, and there is still
// one order.
func TestIdempotentRetryAfterCellKilledBetweenCommitAndAnswer(t *testing.T) {
	env := cellEnv(t)
	addr := freeAddr(t)
	first := startProcess(t, "cell (testhooks)", addr, testhooksServer(t),
		append([]string{"CELLGATE_ADDRESS=" + addr, stallAfterCommitEnv + "=1"}, env...))
	first.waitStatus(t, "/readyz", 200, 60*time.Second)

	// Sign-up is idempotent too, but without a key the hook never runs.
	code, body := first.do(t, "POST", "/signup", "acme", `{"email":"k@acme.test"}`)
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %s", code, body)
	}
	var acct struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(body, &acct); err != nil {
		t.Fatal(err)
	}

	const key = "kill-9-between-commit-and-answer"
	orderBody := fmt.Sprintf(`{"account_id":%d,"amount_cents":4200,"note":"once"}`, acct.ID)
	post := func(url string) (*http.Response, []byte, error) {
		req, err := http.NewRequest("POST", url+"/orders", strings.NewReader(orderBody))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("X-Tenant-ID", "acme")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	type result struct {
		resp *http.Response
		err  error
	}
	firstTry := make(chan result, 1)
	go func() {
		resp, _, err := post(first.url)
		firstTry <- result{resp, err}
	}()

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(first.Logs(), stalledAfterCommit) {
		select {
		case r := <-firstTry:
			t.Fatalf("the first POST /orders was answered (%v, %v) instead of stalling after its commit", r.resp, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the testhooks cell never reported a committed, unwritten answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The commit happened before the kill: the order and the key's answer
	// are in the shard already, and the client has no answer yet.
	if orders, done, _ := orderRows(t, env, "acme", key); orders != 1 || done != 1 {
		t.Fatalf("before the kill: %d orders, %d done keys; want the committed 1 and 1", orders, done)
	}
	select {
	case r := <-firstTry:
		t.Fatalf("the client got an answer before the kill: %v %v", r.resp, r.err)
	default:
	}

	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown code runs
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	select {
	case r := <-firstTry:
		if r.err == nil {
			t.Fatalf("the killed cell's client got an answer: %d", r.resp.StatusCode)
		}
		// Go's transport may retry a keyed POST once on a new connection
		// when its connection breaks: refused then, by the dead cell.
		t.Logf("the first try, as the client saw it: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the client of the killed cell is still waiting")
	}

	// A new process of the release build (no hook) on the same databases.
	second := startCell(t, env)
	second.waitStatus(t, "/readyz", 200, 60*time.Second)
	resp, replayed, err := post(second.url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d, Idempotent-Replayed %q, %s; want the committed 201, replayed", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), replayed)
	}
	orders, done, stored := orderRows(t, env, "acme", key)
	if orders != 1 || done != 1 {
		t.Fatalf("after the retry: %d orders, %d done keys; want 1 and 1", orders, done)
	}
	if string(replayed) != stored {
		t.Fatalf("retry answered %s, the committed answer is %s", replayed, stored)
	}
	var order struct {
		ID          int64 `json:"id"`
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.Unmarshal(replayed, &order); err != nil || order.ID <= 0 || order.AmountCents != 4200 {
		t.Fatalf("replayed body %s: %v", replayed, err)
	}
	// The replayed order is the row in the shard.
	if code, body := second.do(t, "GET", fmt.Sprintf("/orders/%d", order.ID), "acme", ""); code != http.StatusOK {
		t.Fatalf("GET the replayed order: %d %s", code, body)
	}
}
