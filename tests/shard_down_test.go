package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// tenantOnShard returns a tenant id whose slot falls in the example spec's
// even split for shard i of 2 (shard-0: 0-8191, shard-1: 8192-16383).
func tenantOnShard(t testing.TB, i int) string {
	t.Helper()
	for n := 0; n < 1000; n++ {
		id := fmt.Sprintf("tenant-%d", n)
		s, err := slots.Slot(id)
		if err != nil {
			t.Fatal(err)
		}
		if s/8192 == i {
			return id
		}
	}
	t.Fatal("no tenant found")
	return ""
}

// setConnectable allows or refuses new connections to the database at dsn
// and, when refusing, terminates the ones it has.
func setConnectable(t testing.TB, dsn string, ok bool) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testpg.Server())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pgx.Identifier{name}.Sanitize(), ok)); err != nil {
		t.Fatal(err)
	}
	if !ok {
		if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCellShardDownFailsOnlyItsTenants makes one shard unavailable: only
// the tenants on it get 503 with Retry-After; the others keep succeeding;
// when the shard returns, its tenants recover.
func TestCellShardDownFailsOnlyItsTenants(t *testing.T) {
	env := cellEnv(t)
	shard1 := envValue(env, "CELLGATE_SHARD_1_DSN")
	c := startCell(t, env)
	c.waitStatus(t, "/readyz", 200, 30*time.Second)
	up, down := tenantOnShard(t, 0), tenantOnShard(t, 1)
	for _, tn := range []string{up, down} {
		if code, body := c.do(t, "POST", "/signup", tn, `{"email":"x@`+tn+`.test"}`); code != http.StatusCreated {
			t.Fatalf("signup %s: %d %s", tn, code, body)
		}
	}

	setConnectable(t, shard1, false)
	t.Cleanup(func() { setConnectable(t, shard1, true) })
	const n = 40
	for i := 0; i < n; i++ {
		if code, body := c.do(t, "POST", "/orders", up, `{"account_id":1,"amount_cents":100}`); code != http.StatusCreated {
			t.Fatalf("request %d for %s (healthy shard): %d %s", i, up, code, body)
		}
		req, _ := http.NewRequest("GET", c.url+"/account?id=1", nil)
		req.Header.Set("X-Tenant-ID", down)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("request %d for %s (down shard): %d, Retry-After %q; want 503 with Retry-After", i, down, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}

	setConnectable(t, shard1, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := c.do(t, "GET", "/account?id=1", down, "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant on the restored shard still gets %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
