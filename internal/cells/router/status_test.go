package router

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// TestCellsStatus: a dead cell shows down with its error and the time it
// went down; its refusals count; back up, it shows up with the error kept.
func TestCellsStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFixture(t, ProxyConfig{HealthInterval: 3 * time.Second, Now: func() time.Time { return now }})
	byName := func() map[string]CellStatus {
		m := map[string]CellStatus{}
		for _, s := range f.p.Cells() {
			m[s.Name] = s
		}
		return m
	}
	f.seen(t, "/x", tenant2)
	s := byName()["cell-2"]
	if !s.Up || !s.DownSince.IsZero() || s.LastError != "" || s.Requests != 1 || s.Responses[1] != 1 {
		t.Fatalf("healthy cell-2: %+v", s)
	}
	if want := f.cells[1].srv.URL + "/admin/"; s.Console != want || s.Slots[0] != "8192-16383" {
		t.Errorf("console %q slots %q; want %q", s.Console, s.Slots, want)
	}
	f.cells[1].srv.Close()
	for range 3 {
		if resp, _ := f.get(t, "/x", tenant2); resp.StatusCode != 503 {
			t.Fatalf("dead cell answered %d", resp.StatusCode)
		}
	}
	s = byName()["cell-2"]
	if s.Up || !s.DownSince.Equal(now) || !s.LastErrorAt.Equal(now) || !strings.Contains(s.LastError, "dial") {
		t.Fatalf("dead cell-2: %+v", s)
	}
	if s.Ejections != (Ejections{Passive: 1}) || s.Refusals.Down != 2 || s.Errors.Dial != 1 || s.Requests != 4 || s.Responses[4] != 3 {
		t.Errorf("dead cell-2 counters: %+v", s)
	}
	if c1 := byName()["cell-1"]; !c1.Up || c1.Requests != 0 {
		t.Errorf("cell-1: %+v", c1)
	}
	now = now.Add(time.Minute)
	f.cells[1].restart(t)
	f.p.CheckNow(context.Background())
	s = byName()["cell-2"]
	if !s.Up || !s.DownSince.IsZero() || !strings.Contains(s.LastError, "dial") {
		t.Errorf("cell-2 back: %+v", s)
	}
	// An active check that fails records its error without a request.
	f.cells[0].ready.Store(false)
	f.p.CheckNow(context.Background())
	if c1 := byName()["cell-1"]; c1.LastError != "/readyz answered 503" || !c1.LastErrorAt.Equal(now) || !c1.Up {
		t.Errorf("cell-1 after one failed check (FailAfter 2): %+v", c1)
	}
	f.p.CheckNow(context.Background())
	if c1 := byName()["cell-1"]; c1.Up || c1.Ejections.Active != 1 || !c1.DownSince.Equal(now) {
		t.Errorf("cell-1 after two failed checks: %+v", c1)
	}
}

// TestCellsStatusCaps: a refusal at the tenant's router cap counts as the
// tenant cap's, one at the cell's cap as the cell cap's.
func TestCellsStatusCaps(t *testing.T) {
	f := newFixture(t, ProxyConfig{MaxInFlightPerCell: 2, MaxInFlightPerTenant: 1})
	release := make(chan struct{})
	var entered atomic.Int32
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		<-release
	}
	done := make(chan struct{}, 2)
	held := func(tn string) {
		defer func() { done <- struct{}{} }()
		req, _ := http.NewRequest("GET", f.router.URL+"/x/hold", nil)
		req.Header.Set("X-Tenant-ID", tn)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	go held(tenant2)
	go held(tenant2b)
	waitFor(t, 5*time.Second, func() bool { return entered.Load() == 2 })
	if resp, _ := f.get(t, "/x", tenant2); resp.StatusCode != 503 {
		t.Fatalf("over the tenant cap: %d", resp.StatusCode)
	}
	third := ""
	for i := 0; third == ""; i++ {
		tn := "t" + strconv.Itoa(i)
		if slot, _ := slots.Slot(tn); slot >= 8192 {
			third = tn
		}
	}
	if resp, _ := f.get(t, "/x", third); resp.StatusCode != 503 {
		t.Fatalf("over the cell cap: %d", resp.StatusCode)
	}
	close(release)
	<-done
	<-done
	s := f.p.Cells()[1]
	if s.Refusals.TenantCap != 1 || s.Refusals.CellCap != 1 || s.Refusals.Total() != 2 || s.Refusals.Down != 0 {
		t.Errorf("refusals %+v", s.Refusals)
	}
}

// TestSlotMapStatus: generations, digests of the canonical form, and the
// last ReloadHistory reloads newest first.
func TestSlotMapStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFixture(t, ProxyConfig{Now: func() time.Time { return now }})
	st := f.p.SlotMapStatus()
	if st.Generation != 1 || len(st.Digest) != 64 || !st.Current || len(st.Reloads) != 0 || !st.Since.Equal(now) || len(st.Map.Cells) != 2 {
		t.Fatalf("start: %+v", st)
	}
	first := st.Digest
	orig := f.p.Router().SlotMap()
	moved := cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: orig.Cells[0].URL, Slots: []string{"0-12000"}},
		{Name: "cell-2", URL: orig.Cells[1].URL, Slots: []string{"12001-16383"}},
	}}
	now = now.Add(time.Second)
	if err := f.p.ReloadSlotMap(moved.Marshal()); err != nil {
		t.Fatal(err)
	}
	st = f.p.SlotMapStatus()
	if st.Generation != 2 || st.Digest == first || len(st.Reloads) != 1 || st.Reloads[0].Result != "ok" || st.Reloads[0].Generation != 2 || !st.Reloads[0].At.Equal(now) {
		t.Fatalf("after a reload: %+v", st)
	}
	// The same map written differently has the same digest.
	if err := f.p.ReloadSlotMap([]byte(`{"cells":[{"name":"cell-1","url":"` + orig.Cells[0].URL + `","slots":["0-8191"]},{"name":"cell-2","url":"` + orig.Cells[1].URL + `","slots":["8192-10000","10001-16383"]}]}`)); err != nil {
		t.Fatal(err)
	}
	if st = f.p.SlotMapStatus(); st.Digest != first || st.Generation != 3 {
		t.Errorf("the first map again: digest %s (want %s), generation %d", st.Digest, first, st.Generation)
	}
	if err := f.p.ReloadSlotMap([]byte(`{"cells":[]}`)); err == nil {
		t.Fatal("an empty map was accepted")
	}
	st = f.p.SlotMapStatus()
	if r := st.Reloads[0]; r.Result != "invalid" || r.Error == "" || r.Generation != 3 || st.Current {
		t.Errorf("invalid reload: %+v current %v", r, st.Current)
	}
	for i := range 20 {
		m := moved
		if i%2 == 1 {
			m = orig
		}
		if err := f.p.ReloadSlotMap(m.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	st = f.p.SlotMapStatus()
	if len(st.Reloads) != ReloadHistory || st.Reloads[0].Generation != 23 || st.Reloads[ReloadHistory-1].Generation != 23-ReloadHistory+1 {
		t.Errorf("history: %d entries, newest generation %d, oldest %d", len(st.Reloads), st.Reloads[0].Generation, st.Reloads[len(st.Reloads)-1].Generation)
	}
	if st.ReloadsOK != 22 || st.ReloadsInvalid != 1 {
		t.Errorf("counts ok %d invalid %d", st.ReloadsOK, st.ReloadsInvalid)
	}
}

// TestSlotMapReloadAfterUnreadable: a file that could not be read once and
// comes back with the very bytes last loaded is loaded again, so the map
// is current again (the watcher used to compare with the bytes it saw
// before the failure, skip the file, and leave slotmap_current at 0). A
// file that stays unreadable is one entry in the reload history, not one
// per poll (every second by default, which would push the last 16 real
// reloads out within 16 s).
func TestSlotMapReloadAfterUnreadable(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	w, _ := watchedFile(t, f)
	path := w.path
	log := DefaultProxyConfig.withDefaults().Logger
	if err := os.Rename(path, path+".away"); err != nil {
		t.Fatal(err)
	}
	w.poll(f.p, log)
	w.poll(f.p, log) // still gone: counted, but one entry in the history, not one per poll
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_slotmap_current", "")); v != 0 {
		t.Fatalf("slotmap_current = %v with the file gone", v)
	}
	if st := f.p.SlotMapStatus(); st.ReloadsUnreadable != 2 {
		t.Errorf("%d unreadable reloads counted; want 2", st.ReloadsUnreadable)
	}
	if r := f.p.SlotMapStatus().Reloads; len(r) != 1 || r[0].Result != "unreadable" || !strings.Contains(r[0].Error, "no such file") {
		t.Fatalf("reloads %+v", r)
	}
	if err := os.Rename(path+".away", path); err != nil {
		t.Fatal(err)
	}
	w.poll(f.p, log)
	if v := testutil.ToFloat64(gaugeOf(t, f.reg, "cellgate_router_slotmap_current", "")); v != 1 {
		t.Errorf("slotmap_current = %v after the same file came back", v)
	}
	if st := f.p.SlotMapStatus(); !st.Current || st.Reloads[0].Result != "ok" || st.Generation != 2 {
		t.Errorf("after the file came back: %+v", st)
	}
}

// TestRunConsole: with a Console hook the router answers /admin and
// below from it, not /administrator; its run function runs and has ended
// when Run returns. Without one, /admin/ goes to the
// cells.
func TestRunConsole(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		c1 := newTestCell(t, "cell-1")
		var running, stopped atomic.Bool
		var seenProxy *Proxy
		hook := func(p *Proxy) (http.Handler, func(context.Context), error) {
			seenProxy = p
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "console "+r.URL.Path)
			})
			return h, func(ctx context.Context) {
				running.Store(true)
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond) // Run must wait for this
				stopped.Store(true)
			}, nil
		}
		f, stop := runRouter(t, c1, hook)
		base := f.router.URL
		for _, path := range []string{"/admin", "/admin/", "/admin/api/cells", "/admin/login?x=1"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.HasPrefix(string(body), "console /admin") || resp.Header.Get("X-Cellgate-Cell") != "" {
				t.Errorf("%s: %d %q (cell %q)", path, resp.StatusCode, body, resp.Header.Get("X-Cellgate-Cell"))
			}
		}
		if s := f.seen(t, "/administrator", ""); s.Cell != "cell-1" {
			t.Errorf("/administrator went to %q", s.Cell)
		}
		if seenProxy == nil || !running.Load() {
			t.Error("the hook's run function did not run")
		}
		stop()
		if !stopped.Load() {
			t.Error("Run returned before the console's run function ended")
		}
	})
	t.Run("off", func(t *testing.T) {
		c1 := newTestCell(t, "cell-1")
		f, stop := runRouter(t, c1, nil)
		defer stop()
		if s := f.seen(t, "/admin/", ""); s.Cell != "cell-1" || s.URI != "/admin/" {
			t.Errorf("/admin/ without a console: %+v", s)
		}
	})
	t.Run("hook error", func(t *testing.T) {
		cfg := config.Config{Tenancy: headerTenancy(), Cells: []config.Cell{{Name: "cell-1", URL: "http://127.0.0.1:1"}}}
		err := Run(context.Background(), cfg, Options{Address: "127.0.0.1:0", Registry: prometheus.NewRegistry(),
			Console: func(*Proxy) (http.Handler, func(context.Context), error) { return nil, nil, io.ErrUnexpectedEOF }})
		if err != io.ErrUnexpectedEOF {
			t.Errorf("Run = %v", err)
		}
	})
}

// runRouter runs Run over one cell; the fixture sends requests
// through it (only its router is set); stop cancels it and waits.
func runRouter(t *testing.T, c *testCell, hook func(*Proxy) (http.Handler, func(context.Context), error)) (*fixture, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{Tenancy: headerTenancy(), Cells: []config.Cell{{Name: "cell-1", URL: c.srv.URL}}}
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(ctx, cfg, Options{Listener: ln, Registry: prometheus.NewRegistry(),
			Console: hook, Ready: func(net.Addr) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return &fixture{router: &httptest.Server{URL: "http://" + ln.Addr().String()}}, stop
}

// TestReadyReportsMapAndOlderRequests: /readyz names the map in use by its
// digest (what a slot move compares with the map it wrote) and counts the
// forwarded requests a replaced map routed that are still in flight, down
// to 0 once they finish.
func TestReadyReportsMapAndOlderRequests(t *testing.T) {
	f := newFixture(t, ProxyConfig{})
	entered, release := make(chan struct{}), make(chan struct{})
	f.cells[1].extra = func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}
	type ready struct {
		Digest string `json:"slot_map_digest"`
		Gen    uint64 `json:"slot_map_generation"`
		Older  int64  `json:"requests_on_older_maps"`
	}
	readyz := func() ready {
		t.Helper()
		rec := httptest.NewRecorder()
		f.p.ServeReady(rec, httptest.NewRequest("GET", "/readyz", nil))
		var rd ready
		if err := json.Unmarshal(rec.Body.Bytes(), &rd); err != nil {
			t.Fatalf("readyz %s: %v", rec.Body, err)
		}
		return rd
	}
	if rd := readyz(); rd.Digest != f.p.Router().Digest() || rd.Gen != 1 || rd.Older != 0 {
		t.Fatalf("at start: %+v", rd)
	}
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest("GET", f.router.URL+"/x/hold", nil)
		req.Header.Set("X-Tenant-ID", tenant2)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	if rd := readyz(); rd.Older != 0 {
		t.Fatalf("a request on the current map counted as older: %+v", rd)
	}
	m := f.p.Router().SlotMap()
	m.Frozen = []string{"11000-11999"}
	if err := f.p.ReloadSlotMap(m.Marshal()); err != nil {
		t.Fatal(err)
	}
	want, _ := m.Build()
	if rd := readyz(); rd.Digest != want.Digest() || rd.Gen != 2 || rd.Older != 1 {
		t.Fatalf("after freezing with one request in flight: %+v (want digest %s)", rd, want.Digest())
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	waitFor(t, 2*time.Second, func() bool { return readyz().Older == 0 })
	if n := f.p.retired.Len(); n != 0 {
		t.Errorf("%d replaced maps kept after their requests finished", n)
	}
}
