package routerconsole

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/config"
)

// TestInRouter runs the console inside router.Run: /admin is the
// console's (never a cell's), a dead cell shows down with its error, and
// the sampler stops with the router.
func TestInRouter(t *testing.T) {
	cellHandler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.URL.Path)
		})
	}
	c1 := httptest.NewServer(cellHandler("cell-1"))
	defer c1.Close()
	c2 := httptest.NewServer(cellHandler("cell-2"))
	defer c2.Close()
	cfg := config.Config{
		Tenancy: config.Tenancy{Enabled: true, Source: "header", Header: config.HeaderSource{Name: "X-Tenant-ID"}, MaxIDBytes: 64},
		Cells: []config.Cell{
			{Name: "cell-1", URL: c1.URL, Slots: []string{"0-8191"}},
			{Name: "cell-2", URL: c2.URL, Slots: []string{"8192-16383"}},
		},
	}
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var console *Console
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	ready := make(chan struct{})
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	go func() {
		done <- router.Run(ctx, cfg, router.Options{
			Listener: ln, Registry: prometheus.NewRegistry(), Logger: log,
			Proxy: router.ProxyConfig{HealthInterval: 50 * time.Millisecond},
			Ready: func(net.Addr) { close(ready) },
			Console: func(p *router.Proxy) (http.Handler, func(context.Context), error) {
				c, err := New(Config{AdminToken: testToken, Source: p, SampleEvery: 20 * time.Millisecond, Logger: log})
				console = c
				if err != nil {
					return nil, nil, err
				}
				return c, c.Run, nil
			},
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	get := func(path string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/admin/")
	if resp.StatusCode != 200 || resp.Header.Get("X-Cellgate-Cell") != "" || !strings.Contains(body, `data-cell="cell-2"`) ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("/admin/: %d cell %q\n%s", resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"), body)
	}
	if _, body := get("/orders"); !strings.HasPrefix(body, "cell-") {
		t.Fatalf("a tenant path was not forwarded: %q", body)
	}
	c2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := get("/admin/api/cells")
		var cs []router.CellStatus
		if err := json.Unmarshal([]byte(body), &cs); err != nil {
			t.Fatalf("cells: %s", body)
		}
		if !cs[1].Up && cs[1].LastError != "" && !cs[1].DownSince.IsZero() && cs[0].Up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cell-2 never showed down: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, body := get("/admin/"); !strings.Contains(body, `<span class="badge down">down</span>`) {
		t.Error("the overview does not show cell-2 down")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("router.Run did not return")
	}
	// The sampler ended with the router: no sample lands after it returned.
	console.mu.Lock()
	before := console.traffic["cell-1"].requests.Len()
	console.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	console.mu.Lock()
	after := console.traffic["cell-1"].requests.Len()
	console.mu.Unlock()
	if before != after {
		t.Errorf("the sampler ran on after router.Run returned (%d → %d samples)", before, after)
	}
}
