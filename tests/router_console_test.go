package tests

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/routerconsole"
)

// TestRouterConsoleEndToEnd runs the router binary with
// CELLGATE_ROUTER_ADMIN_TOKEN set over two cells (small
// in-process servers that answer /readyz and echo the rest: the console
// reads the router, not the cells' databases). A cell dies and shows down
// with its error and since when; it comes back and shows up; a rewritten
// slot map file shows as a reload with a new generation and digest.
// Without the token, /admin/ goes to the cells as before.
func TestRouterConsoleEndToEnd(t *testing.T) {
	t.Run("on", testRouterConsole)
	t.Run("off", func(t *testing.T) {
		c1 := newEchoCell(t, "cell-1", "")
		mapFile := filepath.Join(t.TempDir(), "slotmap.json")
		writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: c1.URL, Slots: []string{"0-16383"}}}})
		addr := freeAddr(t)
		r := startProcess(t, "router", addr, toolBinary(t, "router"),
			[]string{"CELLGATE_ROUTER_ADDRESS=" + addr, "CELLGATE_ROUTER_ADMIN_TOKEN="}, "-slotmap", mapFile) // empty: no console
		r.waitStatus(t, "/healthz", 200, 10*time.Second)
		resp, body := httpCall(t, "GET", r.url+"/admin/", "", "")
		if resp.StatusCode != 200 || string(body) != "cell-1 /admin/" || resp.Header.Get("X-Cellgate-Cell") != "cell-1" {
			t.Errorf("/admin/ without the token: %d %q", resp.StatusCode, body)
		}
	})
}

// newEchoCell starts a cell that answers /readyz 200 and any other path
// with its name and the path.
func newEchoCell(t *testing.T, name, addr string) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, name+" "+r.URL.Path)
	}))
	if addr != "" {
		var ln net.Listener
		var err error
		for range 100 { // the old listener's port may take a moment to free
			if ln, err = net.Listen("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("relisten on %s: %v", addr, err)
		}
		s.Listener.Close()
		s.Listener = ln
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func testRouterConsole(t *testing.T) {
	c1, c2 := newEchoCell(t, "cell-1", ""), newEchoCell(t, "cell-2", "")
	c2addr := c2.Listener.Addr().String()
	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	first := cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: c1.URL, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: c2.URL, Slots: []string{"8192-16383"}},
	}}
	writeSlotMapFile(t, mapFile, first)
	addr := freeAddr(t)
	args := []string{"-slotmap", mapFile, "-health-interval", routerHealthInterval.String(), "-health-timeout", "1s", "-reload", "50ms"}
	r := startProcess(t, "router", addr, toolBinary(t, "router"),
		[]string{"CELLGATE_ROUTER_ADDRESS=" + addr, "CELLGATE_ROUTER_ADMIN_TOKEN=router-e2e-token-0123456789abcdef0123456789"}, args...)
	r.waitStatus(t, "/healthz", 200, 10*time.Second)

	api := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest("GET", r.url+path, nil)
		req.Header.Set("Authorization", "Bearer router-e2e-token-0123456789abcdef0123456789")
		resp, err := routerClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Cellgate-Cell") != "" {
			t.Fatalf("%s: %d (cell %q) %s", path, resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"), body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
	}
	cellsNow := func() map[string]router.CellStatus {
		var cs []router.CellStatus
		api("/admin/api/cells", &cs)
		m := map[string]router.CellStatus{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	waitCells := func(what string, ok func(map[string]router.CellStatus) bool) map[string]router.CellStatus {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m := cellsNow()
			if ok(m) {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never; cells %+v", what, m)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The console refuses without the token and answers /admin itself.
	if resp, body := httpCall(t, "GET", r.url+"/admin/api/cells", "", ""); resp.StatusCode != 401 || strings.Contains(string(body), "cell-1") {
		t.Errorf("API without a token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := httpCall(t, "GET", r.url+"/admin/", "", ""); resp.StatusCode != 200 || resp.Header.Get("X-Cellgate-Cell") != "" {
		// The client follows the redirect to the login page.
		t.Errorf("/admin/ without a session: %d cell %q", resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"))
	}
	m := waitCells("both up", func(m map[string]router.CellStatus) bool { return m["cell-1"].Up && m["cell-2"].Up })
	if m["cell-2"].Console != c2.URL+"/admin/" {
		t.Errorf("cell-2's console link %q", m["cell-2"].Console)
	}
	// Traffic reaches the counters the console reads.
	for range 3 {
		if resp, body := httpCall(t, "GET", r.url+"/orders", "acme", ""); resp.StatusCode != 200 || string(body) != "cell-2 /orders" {
			t.Fatalf("acme: %d %q", resp.StatusCode, body)
		}
	}
	if m := cellsNow(); m["cell-2"].Requests < 3 || m["cell-2"].Responses[1] < 3 {
		t.Errorf("cell-2 counted %+v", m["cell-2"])
	}

	// cell-2 dies.
	c2.Close()
	m = waitCells("cell-2 down", func(m map[string]router.CellStatus) bool {
		return !m["cell-2"].Up && m["cell-2"].LastError != "" && !m["cell-2"].DownSince.IsZero()
	})
	if !strings.Contains(m["cell-2"].LastError, "refused") || !m["cell-1"].Up {
		t.Errorf("cell-2 down with %q; cell-1 up %v", m["cell-2"].LastError, m["cell-1"].Up)
	}
	if resp, _ := httpCall(t, "GET", r.url+"/orders", "acme", ""); resp.StatusCode != 503 {
		t.Errorf("acme while cell-2 is down: %d", resp.StatusCode)
	}
	if m := cellsNow(); m["cell-2"].Refusals.Down < 1 || m["cell-2"].Ejections.Active+m["cell-2"].Ejections.Passive < 1 {
		t.Errorf("cell-2 refusals %+v ejections %+v", m["cell-2"].Refusals, m["cell-2"].Ejections)
	}
	// The page says so.
	req, _ := http.NewRequest("GET", r.url+"/admin/", nil)
	req.Header.Set("Authorization", "Bearer router-e2e-token-0123456789abcdef0123456789")
	resp, err := routerClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `<span class="badge down">down</span>`) || !strings.Contains(string(page), "refused") {
		t.Errorf("the overview does not show cell-2 down with its error")
	}

	// cell-2 comes back on its address.
	newEchoCell(t, "cell-2", c2addr)
	m = waitCells("cell-2 back", func(m map[string]router.CellStatus) bool { return m["cell-2"].Up })
	if !m["cell-2"].DownSince.IsZero() {
		t.Errorf("cell-2 up but down since %s", m["cell-2"].DownSince)
	}

	// A new slot map file shows as a reload.
	var before routerconsole.SlotMap
	api("/admin/api/slotmap", &before)
	if before.Generation != 1 || before.File != mapFile || len(before.Reloads) != 0 {
		t.Fatalf("slot map at start: %+v", before)
	}
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: c1.URL, Slots: []string{"0-12000"}},
		{Name: "cell-2", URL: c2.URL, Slots: []string{"12001-16383"}},
	}})
	deadline := time.Now().Add(10 * time.Second)
	var after routerconsole.SlotMap
	for {
		api("/admin/api/slotmap", &after)
		if len(after.Reloads) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reload never showed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rl := after.Reloads[0]; rl.Result != "ok" || rl.Generation != 2 || after.Generation != 2 || after.Digest == before.Digest || rl.Digest != after.Digest || !after.Current {
		t.Errorf("after the reload: %+v", after)
	}
}
