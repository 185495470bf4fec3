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

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/testpg"
	cgsql "github.com/cellgate/cellgate/sql"
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
	// A router whose next poll hangs past the deadline: the report is its
	// last answer (the stale digest), not the cut read.
	var hangPolls atomic.Int64
	hangs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if hangPolls.Add(1) > 1 {
			<-req.Context().Done()
			return
		}
		fmt.Fprintf(w, `{"status":"ready","slot_map_digest":%q,"requests_on_older_maps":0}`, strings.Repeat("b", 64))
	}))
	defer hangs.Close()
	mv.cfg = Config{Routers: []string{hangs.URL}, ConfirmTimeout: 200 * time.Millisecond}
	if err := mv.confirmRouters(context.Background(), m, true); err == nil || !strings.Contains(err.Error(), "has not loaded the slot map") {
		t.Errorf("a router whose last poll the deadline cut: %v", err)
	}
	// Not a router at all: refused at its first answer, so the timeout
	// only has to outlast one request on a loaded machine.
	mv.cfg = Config{Routers: []string{slow.URL + "/nothing"}, ConfirmTimeout: 5 * time.Second}
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

// TestCheckShard: a shard fit to stream passes; a table whose replica
// identity does not cover slot, and a server below wal_level = logical,
// are refused in one line naming the table or shard and the fix.
func TestCheckShard(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.CreateDB(t, "check")
	if err := cgsql.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	sh := Shard{Name: "shard-0", DSN: dsn}
	if err := CheckShard(ctx, sh, []string{"accounts", "orders"}); err != nil {
		t.Fatalf("the example's migrated tables: %v", err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE notes (tenant_id text, id bigint, slot int NOT NULL, PRIMARY KEY (tenant_id, id))`); err != nil {
		t.Fatal(err)
	}
	err = CheckShard(ctx, sh, []string{"accounts", "orders", "notes"})
	want := `slotmove: table notes on source shard shard-0: its replica identity does not cover slot, which the move's row filter needs for UPDATE and DELETE; fix: CREATE UNIQUE INDEX "notes_replica_identity" ON "notes" ("tenant_id", "id", slot); ALTER TABLE "notes" REPLICA IDENTITY USING INDEX "notes_replica_identity"`
	if err == nil || err.Error() != want || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a table without a covering identity:\n got %v\nwant %s", err, want)
	}
	if _, err := c.Exec(ctx, `CREATE UNIQUE INDEX notes_replica_identity ON notes (tenant_id, id, slot); ALTER TABLE notes REPLICA IDENTITY USING INDEX notes_replica_identity`); err != nil {
		t.Fatal(err)
	}
	if err := CheckShard(ctx, sh, []string{"notes"}); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	// A primary key that includes slot is a covering identity by default.
	if _, err := c.Exec(ctx, `CREATE TABLE pins (tenant_id text, slot int, id bigint, PRIMARY KEY (tenant_id, slot, id))`); err != nil {
		t.Fatal(err)
	}
	if err := CheckShard(ctx, sh, []string{"pins"}); err != nil {
		t.Fatalf("a primary key with slot: %v", err)
	}
	// A server below wal_level = logical.
	low := testpg.StartCluster(t, testpg.ClusterOptions{WALLevel: "replica"})
	ldsn := low.CreateDB(t, "low")
	err = CheckShard(ctx, Shard{Name: "shard-9", DSN: ldsn}, nil)
	if err == nil || !strings.Contains(err.Error(), "source shard shard-9 has wal_level = replica; online moves need wal_level = logical") {
		t.Fatalf("wal_level = replica: %v", err)
	}
}
