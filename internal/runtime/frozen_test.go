package runtime

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/tenant"
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

// BenchmarkFrozenSlots is the request path's cost of the shard map check
// for a served tenant (nothing frozen, or another range frozen) and for a
// refused one: no allocation in any case.
func BenchmarkFrozenSlots(b *testing.B) {
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "X"},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "X"}, {Name: "shard-1", DSNEnv: "X"}},
	}
	set, err := shards.Open(context.Background(), db, func(string) string { return "postgres://x@127.0.0.1:1/none" })
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	e := echo.New()
	h := frozenSlots(set)(func(echo.Context) error { return nil })
	slot, _ := slots.Slot("acme")
	for _, bc := range []struct {
		name   string
		frozen []slots.Range
		tenant string
	}{
		{"none-frozen", nil, "acme"},
		{"other-frozen", []slots.Range{{Lo: (slot + 100) % slots.Count, Hi: (slot + 100) % slots.Count}}, "acme"},
		{"refused", []slots.Range{{Lo: slot, Hi: slot}}, "acme"},
	} {
		r, err := shards.NewRouting(1, set.Slots().Owner, bc.frozen)
		if err != nil {
			b.Fatal(err)
		}
		if err := set.Install(r); err != nil {
			b.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/x", nil)
		req = req.WithContext(tenant.With(req.Context(), bc.tenant))
		rec := &discardWriter{h: http.Header{}}
		c := e.NewContext(req, rec)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Reset(req, rec)
				_ = h(c)
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the check and the refusal, not a recorder's buffer.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
