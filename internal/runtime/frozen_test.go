package runtime

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/slots"
)

// TestFrozenSlotIsRefusedBeforeTheChain: a tenant whose slot the shard
// map freezes gets 503 slot_moving with Retry-After: 1 and the problem
// body, and neither the app's middleware nor the handler runs; another
// tenant is served; after the routing unfreezes, the tenant is served.
func TestFrozenSlotIsRefusedBeforeTheChain(t *testing.T) {
	cfg := testConfig()
	cfg.Database = config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "X"},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "X"}, {Name: "shard-1", DSNEnv: "X"}},
	}
	set, err := shards.Open(context.Background(), cfg.Database, func(string) string { return "postgres://x@127.0.0.1:1/none" })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry(),
		Getenv: func(string) string { return "" }, Shards: set})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	count := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { reached++; return next(c) }
	}
	s.Tenant("GET", "/me", func(c echo.Context, sh shards.Accessor) error {
		return c.String(200, sh.Shard().Name)
	}, count)
	slot, _ := slots.Slot("acme")
	install := func(version int64, frozen []slots.Range) {
		r, err := shards.NewRouting(version, set.Slots().Owner, frozen)
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Install(r); err != nil {
			t.Fatal(err)
		}
	}
	install(1, []slots.Range{{Lo: slot, Hi: slot}})
	rec := serve(s, "GET", "/me", "", "X-Tenant-ID", "acme")
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || body["code"] != "slot_moving" ||
		rec.Header().Get("Content-Type") != "application/problem+json" || reached != 0 {
		t.Fatalf("frozen tenant: %d Retry-After %q %s (middleware reached %d times)", rec.Code, rec.Header().Get("Retry-After"), rec.Body, reached)
	}
	if rec := serve(s, "GET", "/me", "", "X-Tenant-ID", "globex"); rec.Code != 200 || reached != 1 {
		t.Fatalf("other tenant: %d %s", rec.Code, rec.Body)
	}
	install(2, nil)
	if rec := serve(s, "GET", "/me", "", "X-Tenant-ID", "acme"); rec.Code != 200 || reached != 2 {
		t.Fatalf("after unfreeze: %d %s", rec.Code, rec.Body)
	}
}
