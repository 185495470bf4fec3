package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/cellgate/cellgate/internal/testpg"
)

// cell is a running cell process.
type cell struct {
	cmd     *exec.Cmd
	url     string
	started time.Time
	mu      sync.Mutex
	logs    bytes.Buffer
}

func (c *cell) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.Write(p)
}

func (c *cell) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cellEnv creates the example spec's databases and returns their env.
func cellEnv(t testing.TB) []string {
	t.Helper()
	return cellEnvOn(t, testpg.CreateDB)
}

// cellEnvOn is cellEnv with the databases made by createDB (a private
// cluster's Cluster.CreateDB, for a test that needs its settings).
func cellEnvOn(t testing.TB, createDB func(testing.TB, string) string) []string {
	t.Helper()
	return []string{
		"CELLGATE_CONTROL_DSN=" + createDB(t, "control"),
		"CELLGATE_SHARD_0_DSN=" + createDB(t, "shard0"),
		"CELLGATE_SHARD_1_DSN=" + createDB(t, "shard1"),
	}
}

// startCell starts the server binary with env added to the environment.
func startCell(t testing.TB, env []string, args ...string) *cell {
	t.Helper()
	addr := freeAddr(t)
	return startProcess(t, "cell", addr, serverBin, append([]string{"CELLGATE_ADDRESS=" + addr}, env...), args...)
}

// startProcess starts bin, which will listen on addr, with env added to the
// environment. Its output is kept (and logged when the test fails), and it
// is killed at cleanup unless the test already waited for it.
func startProcess(tb testing.TB, label, addr, bin string, env []string, args ...string) *cell {
	tb.Helper()
	c := &cell{url: "http://" + addr}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = c, c
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
		if tb.Failed() {
			tb.Logf("%s logs:\n%s", label, c.Logs())
		}
	})
	return c
}

// envValue returns the value of key in an environment list, or "".
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// waitStatus polls path until it answers want or the deadline passes, and
// returns how long after the process start that was.
func (c *cell) waitStatus(t testing.TB, path string, want int, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		resp, err := client.Get(c.url + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return time.Since(c.started)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %d within %s", path, want, within)
	return 0
}

func (c *cell) do(t testing.TB, method, path, tenant, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// doChunked POSTs body without a Content-Length (chunked) and returns the
// status.
// getAdminJSON GETs a console URL with an admin (bearer) token and decodes
// its 200 JSON answer into out.
func getAdminJSON(url, token string, out any) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *cell) doChunked(t testing.TB, path, tenant, body string) int {
	t.Helper()
	req, err := http.NewRequest("POST", c.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// Said outright: a body of unknown length is only sent chunked by
	// default, and the length NewRequest found must not be sent.
	req.ContentLength = -1
	req.TransferEncoding = []string{"chunked"}
	req.Header.Set("X-Tenant-ID", tenant)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestCellBootsServesAndDrains boots the example cell on fresh databases:
// /healthz within 2 s of the process start, /readyz once migrated, the
// example sign-up on the tenant's shard, linted metrics, and a clean exit
// on SIGTERM.
func TestCellBootsServesAndDrains(t *testing.T) {
	env := cellEnv(t)
	c := startCell(t, env)
	healthy := c.waitStatus(t, "/healthz", 200, 10*time.Second)
	if healthy > 2*time.Second {
		t.Errorf("/healthz answered %s after start; want ≤ 2s", healthy)
	}
	ready := c.waitStatus(t, "/readyz", 200, 30*time.Second)
	t.Logf("start → healthz %s, start → ready %s", healthy.Round(time.Millisecond), ready.Round(time.Millisecond))

	code, body := c.do(t, "POST", "/signup", "acme", `{"email":"a@acme.test","name":"A"}`)
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %s", code, body)
	}
	var acct struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(body, &acct); err != nil || acct.ID == 0 {
		t.Fatalf("signup body %s: %v", body, err)
	}
	if code, body := c.do(t, "POST", "/signup", "acme", `{"email":"a@acme.test"}`); code != http.StatusConflict {
		t.Fatalf("duplicate signup: %d %s", code, body)
	}
	// The welcome job was written in the sign-up's shard transaction and a
	// shard worker completes it; the rolled-back duplicate left no job.
	waitJobs(t, env, "send_welcome", "acme", 1)
	if code, body := c.do(t, "GET", fmt.Sprintf("/account?id=%d", acct.ID), "acme", ""); code != 200 {
		t.Fatalf("get account: %d %s", code, body)
	}
	if code, _ := c.do(t, "GET", fmt.Sprintf("/account?id=%d", acct.ID), "globex", ""); code != http.StatusNotFound {
		t.Fatalf("another tenant read acme's account: %d", code)
	}
	if code, body := c.do(t, "POST", "/signup", "", `{"email":"x@y.z"}`); code != http.StatusUnauthorized {
		t.Fatalf("signup without tenant: %d %s", code, body)
	}
	if code, body := c.do(t, "POST", "/signup", "bad tenant!", `{"email":"x@y.z"}`); code != http.StatusBadRequest {
		t.Fatalf("signup with a malformed tenant: %d %s", code, body)
	}
	if code, _ := c.do(t, "GET", "/", "", ""); code != 200 {
		t.Fatalf("public route: %d", code)
	}
	// A body over server.body_limit_bytes (1 MiB by default) is 413, whether
	// its Content-Length says so or it is chunked and found out by reading.
	big := `{"email":"` + strings.Repeat("a", 2<<20) + `"}`
	if code, body := c.do(t, "POST", "/signup", "acme", big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized signup with Content-Length: %d %s", code, body)
	}
	if code := c.doChunked(t, "/signup", "acme", big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized chunked signup: %d", code)
	}

	resp, err := http.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(resp.Body).Lint()
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
}

// TestCellRefusesDeniedConfig: a per-cell file the policy denies stops the
// boot with the policy's message naming the path.
func TestCellRefusesDeniedConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cell.json")
	if err := os.WriteFile(file, []byte(`{"jobs":{"workers":2,"tenants":{"lanes":8,"lanes_per_tenant":2}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCell(t, nil, "serve", "-config", file)
	err := waitExit(t, c, 30*time.Second)
	if err == nil {
		t.Fatal("a denied config started")
	}
	if !strings.Contains(c.Logs(), "jobs.tenants.lanes") {
		t.Fatalf("logs do not name jobs.tenants.lanes:\n%s", c.Logs())
	}
}

// TestCellNamesMissingDSN: an unset DSN variable is named in the error.
func TestCellNamesMissingDSN(t *testing.T) {
	c := startCell(t, []string{"CELLGATE_CONTROL_DSN=", "CELLGATE_SHARD_0_DSN=", "CELLGATE_SHARD_1_DSN="})
	if err := waitExit(t, c, 30*time.Second); err == nil {
		t.Fatal("started without DSNs")
	}
	if !strings.Contains(c.Logs(), "CELLGATE_CONTROL_DSN") {
		t.Fatalf("logs do not name CELLGATE_CONTROL_DSN:\n%s", c.Logs())
	}
}

func waitExit(t testing.TB, c *cell, within time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("process still running after %s", within)
		return nil
	}
}

// waitJobs waits until the tenant's shard holds exactly want completed
// jobs of kind and no other job of that kind and tenant.
func waitJobs(t testing.TB, env []string, kind, tenant string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dsns := []string{envValue(env, "CELLGATE_SHARD_0_DSN"), envValue(env, "CELLGATE_SHARD_1_DSN")}
	for {
		completed, other := 0, 0
		for _, dsn := range dsns {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			var c, o int
			err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state <> 'completed')
				FROM cellgate_jobs WHERE kind = $1 AND tenant = $2`, kind, tenant).Scan(&c, &o)
			conn.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			completed, other = completed+c, other+o
		}
		if completed == want && other == 0 {
			return
		}
		if completed > want {
			t.Fatalf("%d completed %s jobs for %s, want %d", completed, kind, tenant, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s jobs for %s: %d completed, %d pending; want %d completed", kind, tenant, completed, other, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
