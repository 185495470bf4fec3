package slotmove

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// TestConfirmRouters: the settle ends when every router reports the
// frozen map's digest and no request on an older map, not before; a
// router that never loads it stops the wait with an error naming it.
func TestConfirmRouters(t *testing.T) {
	m := cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: "http://c1", Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: "http://c2", Slots: []string{"8192-16383"}},
	}, Frozen: []string{"4096-8191"}}
	r, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := r.Digest()
	// A router that loads the map at its 4th poll with 2 requests of the
	// old map in flight, which finish at its 8th.
	var polls atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/readyz" {
			http.NotFound(w, req)
			return
		}
		n := polls.Add(1)
		digest, older := strings.Repeat("0", 64), 0
		if n >= 4 {
			digest = want
		}
		if n >= 4 && n < 8 {
			older = 2
		}
		fmt.Fprintf(w, `{"status":"ready","slot_map_digest":%q,"requests_on_older_maps":%d}`, digest, older)
	}))
	defer slow.Close()
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, `{"status":"ready","slot_map_digest":%q,"requests_on_older_maps":0}`, strings.Repeat("a", 64))
	}))
	defer stuck.Close()

	mv := &mover{cfg: Config{Routers: []string{slow.URL + "/"}, ConfirmTimeout: 5 * time.Second}, http: &http.Client{Timeout: time.Second}}
	if err := mv.confirmRouters(context.Background(), m, true); err != nil {
		t.Fatal(err)
	}
	if n := polls.Load(); n != 8 {
		t.Errorf("confirmed after %d polls; want 8 (the map loaded and the old map's requests done)", n)
	}
	// Without drain, the digest alone confirms.
	polls.Store(3)
	if err := mv.confirmRouters(context.Background(), m, false); err != nil || polls.Load() != 4 {
		t.Errorf("without drain: %v after poll %d; want nil at poll 4", err, polls.Load())
	}

	mv.cfg = Config{Routers: []string{slow.URL, stuck.URL}, ConfirmTimeout: 200 * time.Millisecond}
	start := time.Now()
	err = mv.confirmRouters(context.Background(), m, true)
	if err == nil || !strings.Contains(err.Error(), stuck.URL) || strings.Contains(err.Error(), slow.URL+" ") || !strings.Contains(err.Error(), "has not loaded the slot map") {
		t.Fatalf("a router that never loads the map: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %s; want about the 200ms timeout", d)
	}
	// Not a router at all.
	mv.cfg.Routers = []string{slow.URL + "/nothing"}
	if err := mv.confirmRouters(context.Background(), m, true); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a URL that is no router: %v", err)
	}
}

func TestConfigRoutersMustBeURLs(t *testing.T) {
	c := Config{MapFile: "m", From: "a", To: "b", Source: []Shard{{}}, Target: []Shard{{}}, Tables: []string{"t"}, Routers: []string{"localhost:8090"}}
	err := c.withDefaults().validate()
	if err == nil || !strings.Contains(err.Error(), "Config.Routers[0]") {
		t.Errorf("a router without scheme: %v", err)
	}
}
