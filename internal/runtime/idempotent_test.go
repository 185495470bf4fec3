package runtime

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/runtime/idempotency"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

// TestIdempotentRouteThroughTheServer registers an idempotent route on a
// real server (tenancy, bulkheads, the problem error handler) over a real
// shard: the first request writes and answers, the retry replays it
// without running the handler, another body under the key is 422 problem
// details, and a missing server.idempotency is refused naming the field.
func TestIdempotentRouteThroughTheServer(t *testing.T) {
	dsn := testpg.CreateDB(t, "rtidem")
	ctx := context.Background()
	if err := idempotency.Files.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN", MaxConns: 2},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "DSN", MaxConns: 4}},
	}
	set, err := shards.Open(ctx, db, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, err := set.Shards()[0].Pool.Exec(ctx, `CREATE TABLE orders (tenant_id text, id bigint GENERATED ALWAYS AS IDENTITY)`); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 1024
	cfg.Tenancy.MaxDBConnections = 2
	cfg.Routes = []config.Route{{Method: "POST", Path: "/orders", Handler: "CreateOrder", Idempotent: true}}
	if _, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }, Shards: set}); err == nil || !strings.Contains(err.Error(), "server.idempotency.ttl") {
		t.Fatalf("no server.idempotency: %v", err)
	}
	cfg.Server.Idempotency = config.Idempotency{TTL: config.Duration(24 * time.Hour), Lease: config.Duration(time.Minute), SweepInterval: config.Duration(time.Minute)}
	s, err := New(cfg, Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }, Shards: set})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	s.Idempotent("POST", "/orders", func(c echo.Context, sh shards.Accessor) error {
		runs++
		var id int64
		if err := sh.Tx(c.Request().Context(), func(tx shards.Tx) error {
			return tx.QueryRow(c.Request().Context(), `INSERT INTO orders (tenant_id) VALUES ($1) RETURNING id`, sh.Tenant()).Scan(&id)
		}); err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id})
	})

	first := serve(s, "POST", "/orders", `{"a":1}`, "X-Tenant-ID", "acme", idempotency.Header, "k1", "Content-Type", "application/json")
	if first.Code != http.StatusCreated || first.Header().Get(idempotency.ReplayedHeader) != "" {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	again := serve(s, "POST", "/orders", `{"a":1}`, "X-Tenant-ID", "acme", idempotency.Header, "k1", "Content-Type", "application/json")
	if again.Code != http.StatusCreated || again.Header().Get(idempotency.ReplayedHeader) != "true" || again.Body.String() != first.Body.String() || runs != 1 {
		t.Fatalf("retry: %d %q %s (runs %d)", again.Code, again.Header().Get(idempotency.ReplayedHeader), again.Body, runs)
	}
	other := serve(s, "POST", "/orders", `{"a":2}`, "X-Tenant-ID", "acme", idempotency.Header, "k1", "Content-Type", "application/json")
	var p struct{ Code string }
	if other.Code != http.StatusUnprocessableEntity || other.Header().Get("Content-Type") != httpguard.ContentType ||
		json.Unmarshal(other.Body.Bytes(), &p) != nil || p.Code != "idempotency_key_reused" {
		t.Fatalf("other body: %d %s", other.Code, other.Body)
	}
	// Another tenant's k1 is another key.
	if r := serve(s, "POST", "/orders", `{"a":1}`, "X-Tenant-ID", "globex", idempotency.Header, "k1", "Content-Type", "application/json"); r.Code != http.StatusCreated || runs != 2 {
		t.Fatalf("other tenant: %d %s", r.Code, r.Body)
	}

	plain := newTestServer(t, testConfig())
	defer func() {
		if recover() == nil {
			t.Fatal("Idempotent on a config without an idempotent route did not panic")
		}
	}()
	plain.Idempotent("POST", "/x", func(echo.Context, shards.Accessor) error { return nil })
}
