package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/cells/slotmove"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// The router and slotmove binaries are built together on first use, next
// to serverBin (TestMain removes that directory).
var (
	buildOnce sync.Once
	buildErr  error
)

func toolBinary(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Dir(serverBin)
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/router", "../cmd/slotmove")
		if msg, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build cmd/router and cmd/slotmove: %v\n%s", err, msg)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return filepath.Join(dir, name)
}

// Health-check interval of the routers in these tests.
const routerHealthInterval = 200 * time.Millisecond

// startRouter runs the router binary on a free loopback port with the slot
// map file, a 200 ms health-check interval and a 50 ms reload interval;
// extra flags follow.
func startRouter(tb testing.TB, mapFile string, extra ...string) *cell {
	tb.Helper()
	addr := freeAddr(tb)
	args := append([]string{"-slotmap", mapFile,
		"-health-interval", routerHealthInterval.String(), "-health-timeout", "1s", "-reload", "50ms"}, extra...)
	r := startProcess(tb, "router", addr, toolBinary(tb, "router"), []string{"CELLGATE_ROUTER_ADDRESS=" + addr}, args...)
	r.waitStatus(tb, "/healthz", 200, 10*time.Second)
	return r
}

// runningCell is a running cell with its address and databases.
type runningCell struct {
	*cell
	addr string
	env  []string
}

func (c *runningCell) dsn(name string) string { return envValue(c.env, name) }

// startTwoCells boots two cells, each on its own control and shard
// databases, and waits until both are ready.
func startTwoCells(t testing.TB) (*runningCell, *runningCell) {
	t.Helper()
	return startTwoCellsOn(t, testpg.CreateDB)
}

// startTwoCellsOn is startTwoCells with the databases made by createDB.
func startTwoCellsOn(t testing.TB, createDB func(testing.TB, string) string) (*runningCell, *runningCell) {
	t.Helper()
	var cs [2]*runningCell
	for i := range cs {
		env := cellEnvOn(t, createDB)
		addr := freeAddr(t)
		env = append(env, "CELLGATE_ADDRESS="+addr) // the last value of a key wins
		c := startCell(t, env)
		c.url = "http://" + addr
		cs[i] = &runningCell{cell: c, addr: addr, env: env}
	}
	for _, c := range cs {
		c.waitStatus(t, "/readyz", 200, 60*time.Second)
	}
	return cs[0], cs[1]
}

func writeSlotMapFile(t testing.TB, path string, m cells.SlotMap) {
	t.Helper()
	if err := cells.WriteSlotMap(path, m); err != nil {
		t.Fatal(err)
	}
}

var routerClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// httpCall sends a request and returns the response (body read and closed).
func httpCall(t testing.TB, method, url, tenant, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := routerClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// seedAccount writes an account of tenant straight into the shard of cell
// c that owns the tenant's slot (both cells split their two shards evenly)
// and returns its id. The tests create accounts this way, not with POST
// /signup, so they do not depend on the job runtime that sign-up enqueues
// into; orders, the writes that flow during the tests, go through the
// router.
func seedAccount(t testing.TB, c *runningCell, tenant string) int64 {
	t.Helper()
	s, err := slots.Slot(tenant)
	if err != nil {
		t.Fatal(err)
	}
	env := "CELLGATE_SHARD_0_DSN"
	if s >= 8192 {
		env = "CELLGATE_SHARD_1_DSN"
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(env))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id int64
	if err := conn.QueryRow(ctx, `INSERT INTO accounts (tenant_id, slot, email, name) VALUES ($1, $2, $3, 'Owner') RETURNING id`,
		tenant, s, "owner@"+tenant+".test").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// tenantsInRange returns n tenant ids whose slots lie in rg.
func tenantsInRange(prefix string, rg slots.Range, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s, _ := slots.Slot(id); rg.Contains(s) {
			out = append(out, id)
		}
	}
	return out
}

// TestCellsRouterEndToEnd: router and two cells as real processes. Tenants
// land on their cell; when cell 2 dies its tenants get 503 + Retry-After
// within one health-check interval while cell 1's keep 100% success; a
// restarted cell 2 is back within a few intervals with its data.
func TestCellsRouterEndToEnd(t *testing.T) {
	c1, c2 := startTwoCells(t)
	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: c1.url, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: c2.url, Slots: []string{"8192-16383"}},
	}})
	r := startRouter(t, mapFile)

	on1 := tenantsInRange("one", slots.Range{Lo: 0, Hi: 8191}, 3)
	on2 := tenantsInRange("two", slots.Range{Lo: 8192, Hi: 16383}, 3)
	ids := map[string]int64{}
	for _, group := range []struct {
		tenants []string
		cell    string
		own     *runningCell
		other   *runningCell
	}{{on1, "cell-1", c1, c2}, {on2, "cell-2", c2, c1}} {
		for _, tn := range group.tenants {
			ids[tn] = seedAccount(t, group.own, tn)
			resp, body := httpCall(t, "POST", r.url+"/orders", tn, fmt.Sprintf(`{"account_id":%d,"amount_cents":1234,"note":"via router"}`, ids[tn]))
			if resp.StatusCode != 201 || resp.Header.Get("X-Cellgate-Cell") != group.cell || resp.Header.Get("X-Request-ID") == "" {
				t.Fatalf("ackedOrder of %s via router: %d cell %q request id %q %s", tn, resp.StatusCode,
					resp.Header.Get("X-Cellgate-Cell"), resp.Header.Get("X-Request-ID"), body)
			}
			// GET /orders/{id}: the spec's path parameter reaches the
			// handler through the router; another tenant cannot read it.
			var created struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal(body, &created); err != nil || created.ID <= 0 {
				t.Fatalf("order body %s: %v", body, err)
			}
			byID := fmt.Sprintf("%s/orders/%d", r.url, created.ID)
			if resp, body := httpCall(t, "GET", byID, tn, ""); resp.StatusCode != 200 || !strings.Contains(string(body), "via router") {
				t.Errorf("GET /orders/{id} of %s: %d %s", tn, resp.StatusCode, body)
			}
			if resp, body := httpCall(t, "GET", byID, tn+"-other", ""); resp.StatusCode != 404 {
				t.Errorf("GET /orders/{id} of %s by another tenant: %d %s", tn, resp.StatusCode, body)
			}
			if resp, body := httpCall(t, "GET", r.url+"/orders/not-a-number", tn, ""); resp.StatusCode != 400 {
				t.Errorf("GET /orders/not-a-number: %d %s", resp.StatusCode, body)
			}
			// The order is in the tenant's own cell's databases only.
			path := fmt.Sprintf("/orders?account_id=%d", ids[tn])
			if resp, body := httpCall(t, "GET", group.own.url+path, tn, ""); resp.StatusCode != 200 || !strings.Contains(string(body), "via router") {
				t.Errorf("ackedOrder of %s not on %s: %d %s", tn, group.cell, resp.StatusCode, body)
			}
			if resp, body := httpCall(t, "GET", group.other.url+path, tn, ""); resp.StatusCode != 200 || string(body) != "[]\n" {
				t.Errorf("ackedOrder of %s also on the other cell: %d %s", tn, resp.StatusCode, body)
			}
		}
	}
	// A request id sent by the client reaches the cell and comes back.
	req, _ := http.NewRequest("GET", r.url+fmt.Sprintf("/account?id=%d", ids[on1[0]]), nil)
	req.Header.Set("X-Tenant-ID", on1[0])
	req.Header.Set("X-Request-ID", "e2e-req-1")
	if resp, err := routerClient.Do(req); err != nil || resp.Header.Get("X-Request-ID") != "e2e-req-1" {
		t.Fatalf("request id round trip: %v %v", err, resp.Header)
	} else {
		resp.Body.Close()
	}
	// Without a tenant, a tenant route is refused by a cell as it would be
	// directly, and the public route is served.
	if resp, _ := httpCall(t, "GET", r.url+"/orders?account_id=1", "", ""); resp.StatusCode != 401 {
		t.Errorf("tenant route without tenant via router: %d", resp.StatusCode)
	}
	if resp, _ := httpCall(t, "GET", r.url+"/orders?account_id=1", "bad tenant!", ""); resp.StatusCode != 400 {
		t.Errorf("malformed tenant via router: %d", resp.StatusCode)
	}
	if resp, _ := httpCall(t, "GET", r.url+"/", "", ""); resp.StatusCode != 200 {
		t.Errorf("public route via router: %d", resp.StatusCode)
	}

	// Load on cell 1's tenants for the whole outage.
	var ok1, bad1 atomic.Int64
	var badMsg atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, tn := range on1 {
		wg.Go(func() {
			path := r.url + fmt.Sprintf("/account?id=%d", ids[tn])
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", path, nil)
				req.Header.Set("X-Tenant-ID", tn)
				resp, err := routerClient.Do(req)
				if err != nil {
					bad1.Add(1)
					badMsg.Store(err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok1.Add(1)
				} else {
					bad1.Add(1)
					badMsg.Store(fmt.Sprintf("status %d", resp.StatusCode))
				}
			}
		})
	}

	// Kill cell 2.
	if err := c2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c2.cmd.Wait()
	killed := time.Now()
	deadline := killed.Add(routerHealthInterval)
	var first503 time.Duration
	for time.Since(killed) < 3*routerHealthInterval {
		for _, tn := range on2 {
			resp, body := httpCall(t, "GET", r.url+fmt.Sprintf("/account?id=%d", ids[tn]), tn, "")
			switch {
			case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "" && resp.Header.Get("X-Cellgate-Cell") == "cell-2":
				if first503 == 0 {
					first503 = time.Since(killed)
				}
			case time.Now().After(deadline):
				t.Fatalf("%s %s after cell 2 died: %d retry-after %q %s", tn, time.Since(killed), resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
		}
	}
	if first503 == 0 || first503 > routerHealthInterval {
		t.Fatalf("first 503 for cell 2's tenants after %s; want within %s", first503, routerHealthInterval)
	}
	t.Logf("cell 2 killed: its tenants got 503 + Retry-After after %s", first503.Round(time.Millisecond))

	// Metrics say so, and lint clean.
	resp, body := httpCall(t, "GET", r.url+"/metrics", "", "")
	if !strings.Contains(string(body), `cellgate_router_cell_up{cell="cell-2"} 0`) ||
		!strings.Contains(string(body), `cellgate_router_cell_up{cell="cell-1"} 1`) {
		t.Errorf("router metrics do not show cell 2 down:\n%s", grepLines(string(body), "cell_up"))
	}
	problems, err := promlint.New(strings.NewReader(string(body))).Lint()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}

	// Restart cell 2 on its address, on its databases.
	c2b := startCell(t, c2.env)
	c2b.url = c2.url
	c2b.waitStatus(t, "/readyz", 200, 60*time.Second)
	back := time.Now()
	for {
		resp, _ := httpCall(t, "GET", r.url+fmt.Sprintf("/account?id=%d", ids[on2[0]]), on2[0], "")
		if resp.StatusCode == 200 && resp.Header.Get("X-Cellgate-Cell") == "cell-2" {
			break
		}
		if time.Since(back) > 5*routerHealthInterval {
			t.Fatalf("cell 2 not back through the router %s after it was ready: %d", time.Since(back), resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("cell 2 back through the router %s after its /readyz passed", time.Since(back).Round(time.Millisecond))
	for _, tn := range on2 {
		if resp, body := httpCall(t, "GET", r.url+fmt.Sprintf("/account?id=%d", ids[tn]), tn, ""); resp.StatusCode != 200 {
			t.Errorf("%s after recovery: %d %s", tn, resp.StatusCode, body)
		}
	}

	close(stop)
	wg.Wait()
	if bad1.Load() != 0 || ok1.Load() == 0 {
		t.Fatalf("cell 1's tenants during cell 2's outage: %d ok, %d failed (last: %v)", ok1.Load(), bad1.Load(), badMsg.Load())
	}
	t.Logf("cell 1's tenants during the outage: %d requests, all 2xx", ok1.Load())

	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, r, 20*time.Second); err != nil {
		t.Fatalf("router exit after SIGTERM: %v", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ackedOrder is an acknowledged POST /orders.
type ackedOrder struct {
	tenant string
	id     int64
}

// TestCellsSlotMoveWhileRequestsFlow moves half of cell 1's slots to cell 2
// while every tenant keeps creating orders through the router. First a
// move whose verify fails (a target row tampered in a hook) must leave the
// map unchanged and traffic on cell 1; then the slotmove command does the
// move for real. Every acknowledged order must exist exactly once, on the
// tenant's current cell, and nothing else may exist.
func TestCellsSlotMoveWhileRequestsFlow(t *testing.T) {
	slotmoveBin := toolBinary(t, "slotmove") // before the load starts
	// An online move streams the range by logical replication: the cells'
	// databases live in a private cluster with wal_level = logical.
	pg := testpg.StartCluster(t, testpg.ClusterOptions{})
	c1, c2 := startTwoCellsOn(t, pg.CreateDB)
	dir := t.TempDir()
	mapFile := filepath.Join(dir, "slotmap.json")
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: c1.url, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: c2.url, Slots: []string{"8192-16383"}},
	}})
	r := startRouter(t, mapFile)

	moving := slots.Range{Lo: 4096, Hi: 8191} // within shard-0 of both cells
	movers := tenantsInRange("mv", moving, 4)
	stayers := append(tenantsInRange("st", slots.Range{Lo: 0, Hi: 4095}, 2), tenantsInRange("c2", slots.Range{Lo: 8192, Hi: 16383}, 2)...)
	account := map[string]int64{}
	for _, tn := range movers {
		account[tn] = seedAccount(t, c1, tn)
	}
	for _, tn := range stayers {
		c := c1
		if s, _ := slots.Slot(tn); s >= 8192 {
			c = c2
		}
		account[tn] = seedAccount(t, c, tn)
	}

	// Load: each tenant creates orders one after another. A 503 from the
	// router (frozen slots) is retried; it is not an acknowledgement.
	var (
		mu       sync.Mutex
		acked    []ackedOrder
		refused  = map[string]int{}
		failures []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, tn := range append(append([]string(nil), movers...), stayers...) {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", r.url+"/orders", strings.NewReader(
					fmt.Sprintf(`{"account_id":%d,"amount_cents":%d,"note":"n%d"}`, account[tn], n, n)))
				req.Header.Set("X-Tenant-ID", tn)
				req.Header.Set("Content-Type", "application/json")
				resp, err := routerClient.Do(req)
				if err != nil {
					mu.Lock()
					failures = append(failures, tn+": "+err.Error())
					mu.Unlock()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch resp.StatusCode {
				case 201:
					var o struct{ ID int64 }
					_ = json.Unmarshal(body, &o)
					acked = append(acked, ackedOrder{tn, o.ID})
				case 503:
					refused[tn]++
				default:
					failures = append(failures, fmt.Sprintf("%s: %d %s", tn, resp.StatusCode, body))
				}
				mu.Unlock()
				if resp.StatusCode == 503 {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // some orders before the move

	// 1. A move whose verify fails leaves the map as it was.
	before, err := os.ReadFile(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	shardsOf := func(c *runningCell) []slotmove.Shard {
		return []slotmove.Shard{{Name: "shard-0", DSN: c.dsn("CELLGATE_SHARD_0_DSN")}, {Name: "shard-1", DSN: c.dsn("CELLGATE_SHARD_1_DSN")}}
	}
	_, err = slotmove.Move(context.Background(), slotmove.Config{
		MapFile: mapFile, Range: moving, From: "cell-1", To: "cell-2",
		Source: shardsOf(c1), Target: shardsOf(c2), Settle: 300 * time.Millisecond,
		Tables: spec.Config().Database.TenantTables,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		AfterCopy: func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, c2.dsn("CELLGATE_SHARD_0_DSN"))
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `UPDATE orders SET note = 'tampered' WHERE tenant_id = $1`, movers[0])
			return err
		},
	})
	var ve *slotmove.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("tampered move: %v; want a VerifyError", err)
	}
	after, _ := os.ReadFile(mapFile)
	if string(before) != string(after) {
		t.Fatalf("a failed verify changed the map:\n%s", after)
	}
	// Traffic for the range goes on at cell 1.
	time.Sleep(200 * time.Millisecond)
	if resp, body := httpCall(t, "GET", r.url+fmt.Sprintf("/orders?account_id=%d", account[movers[0]]), movers[0], ""); resp.StatusCode != 200 || resp.Header.Get("X-Cellgate-Cell") != "cell-1" {
		t.Fatalf("after the failed move: %d on %q %s", resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"), body)
	}

	// 2. The real move, by the command, while the load goes on.
	layout := filepath.Join(dir, "layout.json")
	if err := os.WriteFile(layout, []byte(`{"cells":{
		"cell-1":[{"name":"shard-0","dsn_env":"C1_S0"},{"name":"shard-1","dsn_env":"C1_S1"}],
		"cell-2":[{"name":"shard-0","dsn_env":"C2_S0"},{"name":"shard-1","dsn_env":"C2_S1"}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mv := exec.Command(slotmoveBin, "-map", mapFile, "-layout", layout, "-slots", moving.String(),
		"-from", "cell-1", "-to", "cell-2", "-settle", "300ms", "-reset-target")
	mv.Env = append(os.Environ(),
		"C1_S0="+c1.dsn("CELLGATE_SHARD_0_DSN"), "C1_S1="+c1.dsn("CELLGATE_SHARD_1_DSN"),
		"C2_S0="+c2.dsn("CELLGATE_SHARD_0_DSN"), "C2_S1="+c2.dsn("CELLGATE_SHARD_1_DSN"))
	out, err := mv.CombinedOutput()
	if err != nil {
		t.Fatalf("slotmove: %v\n%s", err, out)
	}
	t.Logf("slotmove:\n%s", out)
	time.Sleep(300 * time.Millisecond) // orders after the move, on cell 2
	close(stop)
	wg.Wait()

	for _, f := range failures {
		t.Errorf("request failed: %s", f)
	}
	for _, tn := range stayers {
		if refused[tn] != 0 {
			t.Errorf("%s (not moving) was refused %d times", tn, refused[tn])
		}
	}

	// Every acknowledged order exactly once in the whole system, on the
	// tenant's cell; no unacknowledged extras.
	type key struct {
		tenant string
		id     int64
	}
	where := map[key][]string{}
	for _, c := range []struct {
		name string
		tc   *runningCell
	}{{"cell-1", c1}, {"cell-2", c2}} {
		for _, sh := range []string{"CELLGATE_SHARD_0_DSN", "CELLGATE_SHARD_1_DSN"} {
			conn, err := pgx.Connect(context.Background(), c.tc.dsn(sh))
			if err != nil {
				t.Fatal(err)
			}
			rows, _ := conn.Query(context.Background(), `SELECT tenant_id, id FROM orders`)
			for rows.Next() {
				var k key
				if err := rows.Scan(&k.tenant, &k.id); err != nil {
					t.Fatal(err)
				}
				where[k] = append(where[k], c.name)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			conn.Close(context.Background())
		}
	}
	isMover := map[string]bool{}
	for _, tn := range movers {
		isMover[tn] = true
	}
	perTenant := map[string]int{}
	for _, o := range acked {
		perTenant[o.tenant]++
		locs := where[key(o)]
		want := "cell-1"
		if s, _ := slots.Slot(o.tenant); s >= 8192 || isMover[o.tenant] {
			want = "cell-2"
		}
		if len(locs) != 1 || locs[0] != want {
			t.Errorf("ackedOrder %s/%d is on %v; want exactly once on %s", o.tenant, o.id, locs, want)
		}
		delete(where, key(o))
	}
	for k, locs := range where {
		t.Errorf("ackedOrder %s/%d on %v was never acknowledged", k.tenant, k.id, locs)
	}
	for _, tn := range movers {
		if perTenant[tn] == 0 {
			t.Errorf("no orders acknowledged for %s", tn)
		}
	}
	t.Logf("%d orders acknowledged (%v per tenant); moving tenants refused %v times while frozen", len(acked), perTenant, refused)

	// The moved tenants are served by cell 2 with all their orders.
	resp, body := httpCall(t, "GET", r.url+fmt.Sprintf("/orders?account_id=%d&limit=500", account[movers[1]]), movers[1], "")
	var listed []json.RawMessage
	_ = json.Unmarshal(body, &listed)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cellgate-Cell") != "cell-2" || len(listed) != min(perTenant[movers[1]], 500) {
		t.Errorf("moved tenant via router: %d on %q, %d orders listed of %d", resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"), len(listed), perTenant[movers[1]])
	}
}
