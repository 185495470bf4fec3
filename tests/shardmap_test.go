package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// TestShardMapMoveAcrossTwoServers is the cell side of a move between two
// shards of one cell: two servers of the cell (in-process, each with its
// own pools and shard map watcher) over one control database and two
// shards. A freeze makes both answer the range's tenant 503 slot_moving
// within 2 s while another tenant is served; after the switch and the
// unfreeze both send the tenant's requests to the new shard. A request the
// old map let through holds a drain until it ends.
func TestShardMapMoveAcrossTwoServers(t *testing.T) {
	ctx := context.Background()
	env := map[string]string{
		"SM_CONTROL": testpg.CreateDB(t, "sm_control"),
		"SM_SHARD0":  testpg.CreateDB(t, "sm_shard0"),
		"SM_SHARD1":  testpg.CreateDB(t, "sm_shard1"),
	}
	if err := shardmap.Migrate(ctx, env["SM_CONTROL"]); err != nil {
		t.Fatal(err)
	}
	cfg := bhConfig(0, 0, 0, 5*time.Second)
	cfg.Database = config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "SM_CONTROL", MaxConns: 4},
		Shards: []config.Shard{
			{Name: "shard-0", DSNEnv: "SM_SHARD0", Slots: []string{"0-8191"}, MaxConns: 4},
			{Name: "shard-1", DSNEnv: "SM_SHARD1", Slots: []string{"8192-16383"}, MaxConns: 4},
		},
	}
	boot, err := shardmap.FromConfig(cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	// The moving tenant's slot lies in 4096-8191 (shard-0 in the config);
	// the other tenant's below it.
	moving, other := tenantIn(t, 4096, 8191), tenantIn(t, 0, 4095)
	rg := []slots.Range{{Lo: 4096, Hi: 8191}}

	// /hold stays in flight until release is closed: a request routed by
	// the map a freeze replaces.
	held, release := make(chan struct{}, 1), make(chan struct{})
	var urls []string
	for i := range 2 {
		set, err := shards.Open(ctx, cfg.Database, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
		w, err := shardmap.NewWatcher(set.Control(), set, shardmap.Options{
			Boot: boot, Process: fmt.Sprintf("server-%d", i), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		t.Cleanup(func() { cancel(); <-done })
		c := startInProcess(t, cfg, set, func(s *runtime.Server) {
			s.Tenant("GET", "/where", func(c echo.Context, sh shards.Accessor) error {
				var db string
				if err := sh.Conn(c.Request().Context(), func(conn *pgxpool.Conn) error {
					return conn.QueryRow(c.Request().Context(), "SELECT current_database()").Scan(&db)
				}); err != nil {
					return err
				}
				return c.String(http.StatusOK, db)
			})
			s.Tenant("GET", "/hold", func(c echo.Context, _ shards.Accessor) error {
				held <- struct{}{}
				<-release
				return c.String(http.StatusOK, "released")
			})
		})
		urls = append(urls, c.url)
	}
	// A failing test must not leave /hold blocking the servers' shutdown
	// (cleanups run last registered first: this one before theirs).
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	control, err := pgxpool.New(ctx, env["SM_CONTROL"])
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	confirm := func(version int64, within time.Duration) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		if err := shardmap.WaitApplied(cctx, control, version, shardmap.WaitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	confirm(1, 10*time.Second) // both servers have read (one has written) the config's map

	shard0, shard1 := dbName(t, env["SM_SHARD0"]), dbName(t, env["SM_SHARD1"])
	for _, u := range urls {
		if code, body, _ := where(t, u, moving); code != 200 || body != shard0 {
			t.Fatalf("%s before the move: %d %q, want shard-0 (%s)", u, code, body, shard0)
		}
	}

	// Another tenant's request in flight on server 0 across the freeze.
	holdDone := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", urls[0]+"/hold", nil)
		req.Header.Set("X-Tenant-ID", other)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			holdDone <- 0
			return
		}
		resp.Body.Close()
		holdDone <- resp.StatusCode
	}()
	<-held

	v, err := shardmap.Freeze(ctx, control, rg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, u := range urls {
		for {
			code, body, h := where(t, u, moving)
			if code == http.StatusServiceUnavailable {
				var p map[string]any
				if err := json.Unmarshal([]byte(body), &p); err != nil || p["code"] != "slot_moving" || h.Get("Retry-After") != "1" {
					t.Fatalf("%s frozen: %s Retry-After %q", u, body, h.Get("Retry-After"))
				}
				break
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s still answers the frozen tenant %d after 2 s", u, code)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if code, body, _ := where(t, u, other); code != 200 || body != shard0 {
			t.Fatalf("%s: the other tenant during the freeze: %d %q", u, code, body)
		}
	}
	t.Logf("both servers refuse the frozen range %v after the freeze", time.Since(start))
	confirm(v, 2*time.Second)
	// Every process has the frozen map, but server 0 still runs a request
	// the old map let through: a drain waits for it, naming the process.
	dctx, cancelDrain := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelDrain()
	if err := shardmap.WaitApplied(dctx, control, v, shardmap.WaitOptions{Drain: true}); err == nil || !strings.Contains(err.Error(), "server-0 with 1 requests on older maps") {
		t.Fatalf("drain with a request of the old map in flight: %v", err)
	}
	free()
	if code := <-holdDone; code != http.StatusOK {
		t.Fatalf("held request: %d", code)
	}
	dctx, cancelDrain = context.WithTimeout(ctx, 2*time.Second)
	defer cancelDrain()
	if err := shardmap.WaitApplied(dctx, control, v, shardmap.WaitOptions{Drain: true}); err != nil {
		t.Fatalf("drain after the held request ended: %v", err)
	}

	if v, err = shardmap.Switch(ctx, control, rg, "shard-1"); err != nil {
		t.Fatal(err)
	}
	confirm(v, 2*time.Second)
	for _, u := range urls {
		if code, _, _ := where(t, u, moving); code != http.StatusServiceUnavailable {
			t.Fatalf("%s: switched but still frozen, got %d", u, code)
		}
	}
	if v, err = shardmap.Unfreeze(ctx, control, rg); err != nil {
		t.Fatal(err)
	}
	confirm(v, 2*time.Second)
	for _, u := range urls {
		if code, body, _ := where(t, u, moving); code != 200 || body != shard1 {
			t.Fatalf("%s after the move: %d %q, want shard-1 (%s)", u, code, body, shard1)
		}
		if code, body, _ := where(t, u, other); code != 200 || body != shard0 {
			t.Fatalf("%s: the other tenant after the move: %d %q", u, code, body)
		}
	}
}

// tenantIn returns a tenant id whose slot lies in lo..hi.
func tenantIn(t testing.TB, lo, hi int) string {
	t.Helper()
	for i := range 100000 {
		id := fmt.Sprintf("tenant-%d", i)
		if s, _ := slots.Slot(id); s >= lo && s <= hi {
			return id
		}
	}
	t.Fatalf("no tenant with a slot in %d-%d", lo, hi)
	return ""
}

// dbName is the database name of a DSN.
func dbName(t testing.TB, dsn string) string {
	t.Helper()
	c, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return c.ConnConfig.Database
}

// where asks a server which database serves tenant.
func where(t testing.TB, url, tenant string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/where", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant-ID", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}
