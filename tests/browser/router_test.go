package browser

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/routerconsole"
)

// TestRouterConsoleInBrowser runs a router (router.Run with the
// router's console, as cmd/router wires it) over three small cells, sends
// traffic, kills one cell and reloads the slot map, then logs in to the
// router's console in a real browser: the overview shows the dead cell and
// links to every cell's console, the slot map page shows the reloads.
// Screenshots: router.png, router-slotmap.png.
func TestRouterConsoleInBrowser(t *testing.T) {
	dir := *shots
	if dir == "" {
		dir = t.TempDir()
	}
	const token = "router-browser-token-0123456789abcdef0123"
	var cellSrv []*httptest.Server
	for _, name := range []string{"cell-1", "cell-2", "cell-3"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.URL.Path)
		}))
		t.Cleanup(s.Close)
		cellSrv = append(cellSrv, s)
	}
	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	spec := func(slots ...string) cells.SlotMap {
		m := cells.SlotMap{}
		for i, s := range cellSrv {
			m.Cells = append(m.Cells, cells.CellSpec{Name: "cell-" + string(rune('1'+i)), URL: s.URL, Slots: []string{slots[i]}})
		}
		return m
	}
	if err := cells.WriteSlotMap(mapFile, spec("0-5460", "5461-10922", "10923-16383")); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{Tenancy: config.Tenancy{Enabled: true, Source: "header", Header: config.HeaderSource{Name: "X-Tenant-ID"}, MaxIDBytes: 64}}
	// Longer than 5 s: net/http's Shutdown counts a connection that has
	// sent no request yet as active until it is 5 s old, and chromium
	// opens such connections ahead of use.
	cfg.Server.ShutdownTimeout = config.Duration(10 * time.Second)
	cfg.Router.MaxInFlightPerTenant = 256
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- router.Run(ctx, cfg, router.Options{
			Listener: ln, SlotMapFile: mapFile, ReloadInterval: 50 * time.Millisecond,
			Proxy: router.ProxyConfig{HealthInterval: 100 * time.Millisecond},
			Console: func(p *router.Proxy) (http.Handler, func(context.Context), error) {
				c, err := routerconsole.New(routerconsole.Config{AdminToken: token, Source: p, SlotMapFile: mapFile, SampleEvery: 100 * time.Millisecond})
				if err != nil {
					return nil, nil, err
				}
				return c, c.Run, nil
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	base := "http://" + ln.Addr().String()

	// Traffic until the test ends: every tenant on its cell; cell-3 dies
	// after 1.5 s, so its tenants get the router's 503s from then on.
	var wg sync.WaitGroup
	stopTraffic := make(chan struct{})
	for _, tenant := range []string{"umbrella", "bar", "acme", "globex", "initech", "hooli", "wayne"} {
		wg.Go(func() {
			for {
				select {
				case <-stopTraffic:
					return
				default:
				}
				req, _ := http.NewRequest("GET", base+"/orders", nil)
				req.Header.Set("X-Tenant-ID", tenant)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(15 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { close(stopTraffic); wg.Wait() }) // before the router stops
	time.Sleep(1500 * time.Millisecond)
	cellSrv[2].Close()
	time.Sleep(1500 * time.Millisecond)
	// A bad map, then a good one that moves slots: two reloads.
	if err := os.WriteFile(mapFile, []byte(`{"cells":[{"name":"cell-1","url":"http://127.0.0.1:1","slots":["0-10"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := cells.WriteSlotMap(mapFile, spec("0-6000", "6001-10922", "10923-16383")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	b := newBrowser(t)
	run(t, b, "log in to the router",
		chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
	)
	follow(t, b, "log in to the router", `#login`, chromedp.WaitVisible(`#cells`, chromedp.ByQuery))
	var table string
	var links []map[string]string
	run(t, b, "read the cells",
		chromedp.Text(`#cells tbody`, &table, chromedp.ByQuery),
		chromedp.AttributesAll(`a.cell-console`, &links, chromedp.ByQueryAll),
	)
	if !strings.Contains(table, "cell-3") || !strings.Contains(table, "down") || !strings.Contains(table, "refused") {
		t.Errorf("the overview does not show cell-3 down with its error:\n%s", table)
	}
	if len(links) != 3 || links[0]["href"] != cellSrv[0].URL+"/admin/" {
		t.Errorf("console links %v", links)
	}
	var svg string
	run(t, b, "traffic chart", chromedp.OuterHTML(`#traffic-chart`, &svg, chromedp.ByQuery))
	if !strings.Contains(svg, "<polyline") {
		t.Errorf("the traffic chart has no line:\n%.400s", svg)
	}
	shot(t, b, dir, "router.png")

	follow(t, b, "slot map page", `a[href="/admin/slotmap"]`, chromedp.WaitVisible(`#reloads`, chromedp.ByQuery))
	var reloads string
	run(t, b, "read the reloads", chromedp.Text(`#reloads tbody`, &reloads, chromedp.ByQuery))
	if !strings.Contains(reloads, "ok") || !strings.Contains(reloads, "invalid") {
		t.Errorf("reloads table:\n%s", reloads)
	}
	shot(t, b, dir, "router-slotmap.png")
}
