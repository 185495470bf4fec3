package slotmove

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cgsql "github.com/cellgate/cellgate/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// cluster is the package's private PostgreSQL cluster (wal_level =
// logical), shared by its tests: the moves stream from logical
// replication slots, which the shared test server may not allow.
var cluster *testpg.Cluster

func TestMain(m *testing.M) {
	c, err := testpg.NewCluster(testpg.ClusterOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// world is two cells on real databases: cell-1 with two shards (0-8191,
// 8192-16383), cell-2 with one, and a slot map giving cell-1 everything
// but 16000-16383.
type world struct {
	mapFile string
	src     []Shard
	dst     []Shard
	conns   map[string]*pgx.Conn // by shard name
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{conns: map[string]*pgx.Conn{}}
	mk := func(name string, slotSpecs ...string) Shard {
		dsn := cluster.CreateDB(t, name)
		if err := cgsql.Migrate(ctx, dsn); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		w.conns[name] = c
		return Shard{Name: name, DSN: dsn, Slots: slotSpecs}
	}
	w.src = []Shard{mk("c1s0", "0-8191"), mk("c1s1", "8192-16383")}
	w.dst = []Shard{mk("c2s0")}
	w.mapFile = filepath.Join(t.TempDir(), "slotmap.json")
	err := cells.WriteSlotMap(w.mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: "http://127.0.0.1:1", Slots: []string{"0-15999"}},
		{Name: "cell-2", URL: "http://127.0.0.1:2", Slots: []string{"16000-16383"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// tenantsIn returns n tenant ids whose slots lie in rg.
func tenantsIn(rg slots.Range, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("tenant-%d", i)
		if s, _ := slots.Slot(id); rg.Contains(s) {
			out = append(out, id)
		}
	}
	return out
}

// seed writes accounts and orders for tenants on their source shard.
func (w *world) seed(t *testing.T, tenants []string, perTenant int) {
	t.Helper()
	ctx := context.Background()
	for _, tn := range tenants {
		s, _ := slots.Slot(tn)
		c := w.conns["c1s0"]
		if s >= 8192 {
			c = w.conns["c1s1"]
		}
		for i := range perTenant {
			var id int64
			err := c.QueryRow(ctx, `INSERT INTO accounts (tenant_id, slot, email, name) VALUES ($1, $2, $3, 'n') RETURNING id`,
				tn, s, fmt.Sprintf("u%d@%s.test", i, tn)).Scan(&id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, `INSERT INTO orders (tenant_id, slot, account_id, amount_cents, note) VALUES ($1, $2, $3, $4, 'x')`,
				tn, s, id, 100+i); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func count(t *testing.T, c *pgx.Conn, table string, rg slots.Range) int64 {
	t.Helper()
	var n int64
	if err := c.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM %s WHERE slot BETWEEN $1 AND $2", table), rg.Lo, rg.Hi).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *world) config(t *testing.T, rg slots.Range) Config {
	return Config{
		MapFile: w.mapFile, Range: rg, From: "cell-1", To: "cell-2",
		Source: w.src, Target: w.dst, ChunkSlots: 100, Tables: []string{"accounts", "orders"},
		Settle: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

// The moved range straddles cell-1's two shards, so both segments kinds
// run: 8100-8191 from c1s0, 8192-8300 from c1s1.
var moveRange = slots.Range{Lo: 8100, Hi: 8300}

func TestMoveCopiesVerifiesSwitchesDeletes(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	in := tenantsIn(moveRange, 6)
	out := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 3)
	w.seed(t, in, 3)
	w.seed(t, out, 2)
	// Ids on the source, to check they are kept.
	var wantIDs []string
	for _, sh := range []string{"c1s0", "c1s1"} {
		rows, _ := w.conns[sh].Query(ctx, `SELECT tenant_id || ':' || id FROM accounts WHERE slot BETWEEN $1 AND $2 ORDER BY 1`, moveRange.Lo, moveRange.Hi)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		wantIDs = append(wantIDs, ids...)
	}

	rep, err := Move(ctx, w.config(t, moveRange))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Copied["accounts"] != 18 || rep.Copied["orders"] != 18 || rep.Deleted["accounts"] != 18 || rep.Deleted["orders"] != 18 || rep.Verified["orders"] != 18 {
		t.Errorf("report %+v", rep)
	}
	dst := w.conns["c2s0"]
	rows, _ := dst.Query(ctx, `SELECT tenant_id || ':' || id FROM accounts WHERE slot BETWEEN $1 AND $2`, moveRange.Lo, moveRange.Hi)
	gotIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sortStrings(gotIDs), ",") != strings.Join(sortStrings(wantIDs), ",") {
		t.Errorf("ids on the target %v; want %v", gotIDs, wantIDs)
	}
	for _, sh := range []string{"c1s0", "c1s1"} {
		for _, tb := range []string{"accounts", "orders"} {
			if n := count(t, w.conns[sh], tb, moveRange); n != 0 {
				t.Errorf("%s.%s still has %d rows of the range", sh, tb, n)
			}
		}
	}
	if n := count(t, w.conns["c1s0"], "accounts", slots.Range{Lo: 0, Hi: 8000}); n != 6 {
		t.Errorf("rows outside the range: %d; want 6", n)
	}
	_, r, err := cells.ReadSlotMap(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{8099, 8100, 8300, 8301} {
		c, _ := r.ForSlot(s)
		want := "cell-1"
		if moveRange.Contains(s) {
			want = "cell-2"
		}
		if c.Name != want || r.Frozen(s) {
			t.Errorf("slot %d on %s (frozen %v); want %s", s, c.Name, r.Frozen(s), want)
		}
	}
	if _, err := os.Stat(w.mapFile + ".move.json"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left: %v", err)
	}
	// New rows of a moved tenant on the target never reuse a copied id.
	var maxID, newID int64
	_ = dst.QueryRow(ctx, `SELECT max(id) FROM accounts`).Scan(&maxID)
	s, _ := slots.Slot(in[0])
	if err := dst.QueryRow(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, 'new@x') RETURNING id`, in[0], s).Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID <= maxID {
		t.Errorf("new id %d not above the copied ids (max %d)", newID, maxID)
	}
	// The fence is gone: the source accepts writes to the range again
	// (a later move back must be possible).
	if _, err := w.conns["c1s1"].Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ('x', 8200, 'y')`); err != nil {
		t.Errorf("fence left behind: %v", err)
	}
	if _, err := w.conns["c1s1"].Exec(ctx, `DELETE FROM accounts WHERE tenant_id = 'x'`); err != nil {
		t.Fatal(err)
	}

	// Running the finished move again is a no-op.
	if _, err := Move(ctx, w.config(t, moveRange)); err != nil {
		t.Errorf("re-run of a finished move: %v", err)
	}
}

func TestMoveFailedVerifyLeavesMapUnchanged(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	in := tenantsIn(moveRange, 4)
	w.seed(t, in, 2)
	before, err := os.ReadFile(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := w.config(t, moveRange)
	var fenceErr error
	cfg.BeforeVerify = func(ctx context.Context) error {
		// Tamper with one copied row on the target.
		_, err := w.conns["c2s0"].Exec(ctx, `UPDATE accounts SET name = 'tampered' WHERE tenant_id = $1`, in[1])
		return err
	}
	cfg.AfterCopy = func(ctx context.Context) error {
		// The source is fenced now: writes to the range fail...
		s, _ := slots.Slot(in[0])
		_, fenceErr = w.conns["c1s1"].Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, 'late@x')`, in[0], s)
		// ...while others go on.
		_, err := w.conns["c1s1"].Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ('other', 9999, 'o@x')`)
		return err
	}
	_, err = Move(ctx, cfg)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Table != "accounts" {
		t.Fatalf("err = %v; want a VerifyError on accounts", err)
	}
	var pe *pgconn.PgError
	if !errors.As(fenceErr, &pe) || pe.Code != "55000" {
		t.Errorf("write to a fenced slot: %v; want SQLSTATE 55000", fenceErr)
	}
	after, err := os.ReadFile(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("map changed by a failed move:\n%s\n---\n%s", before, after)
	}
	if n := count(t, w.conns["c1s0"], "accounts", moveRange) + count(t, w.conns["c1s1"], "accounts", moveRange); n != 8 {
		t.Errorf("source lost rows: %d accounts; want 8", n)
	}
	s, _ := slots.Slot(in[0])
	if _, err := w.conns["c1s1"].Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, 'after@x')`, in[0], s); err != nil {
		t.Errorf("fence not dropped after the failed move: %v", err)
	}
	// A plain re-run resumes the stream and keeps failing (the stream
	// never touches the tampered row); with ResetTarget it starts over
	// and succeeds.
	cfg.AfterCopy, cfg.BeforeVerify = nil, nil
	if _, err := Move(ctx, cfg); !errors.As(err, &ve) {
		t.Fatalf("re-run without reset: %v", err)
	}
	cfg.ResetTarget = true
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verified["accounts"] != 9 {
		t.Errorf("verified %d accounts; want 9", rep.Verified["accounts"])
	}
}

// TestMoveResumesAfterSwitch: a crash between the switch and the delete
// leaves the map switched and a "switched" state file; the re-run only
// deletes at the source.
func TestMoveResumesAfterSwitch(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.seed(t, tenantsIn(moveRange, 3), 1)
	if _, err := Move(ctx, w.config(t, moveRange)); err != nil {
		t.Fatal(err)
	}
	// Put rows back on the source as if the delete had never run.
	w.seed(t, tenantsIn(moveRange, 3), 1)
	if err := writeState(w.mapFile+".move.json", state{From: "cell-1", To: "cell-2", Slots: moveRange.String(), Step: stepSwitched}); err != nil {
		t.Fatal(err)
	}
	rep, err := Move(ctx, w.config(t, moveRange))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resumed != "delete" || rep.Deleted["accounts"] != 3 || rep.Copied["accounts"] != 0 {
		t.Errorf("resume report %+v", rep)
	}
	// Without a state file, a switched map with rows left at the source
	// is refused rather than deleted.
	w.seed(t, tenantsIn(moveRange, 1), 1)
	if _, err := Move(ctx, w.config(t, moveRange)); err == nil || !strings.Contains(err.Error(), "no verified move") {
		t.Errorf("delete without a verified state: %v", err)
	}
}

// TestMoveRefusesToFreezeWhileLagging: with a MaxFreezeLag no catch-up can
// meet, the move stops right before the freeze with a FreezeLagError: the
// map is untouched, the range's tenants still write at the source, and a
// run without the bound resumes the stream (no second copy) and finishes
// with every row, the ones written in between included.
func TestMoveRefusesToFreezeWhileLagging(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	in := tenantsIn(moveRange, 4)
	w.seedBulk(t, in, 20)
	before, err := os.ReadFile(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := w.config(t, moveRange)
	cfg.MaxFreezeLag = time.Nanosecond
	_, err = Move(ctx, cfg)
	var le *FreezeLagError
	if !errors.As(err, &le) || le.Max != time.Nanosecond || le.Lag <= le.Max || !strings.Contains(err.Error(), "nothing is frozen") {
		t.Fatalf("err = %v; want a FreezeLagError above 1ns", err)
	}
	after, err := os.ReadFile(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("map changed by a refused freeze:\n%s\n---\n%s", before, after)
	}
	w.writeThroughMap(t, in) // the source still takes the range's writes
	want := rangeRows(t, w.conns["c1s0"], w.conns["c1s1"])

	cfg.MaxFreezeLag = 0
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatalf("re-run without the bound: %v", err)
	}
	if rep.Resumed != "stream" {
		t.Errorf("re-run resumed at %q; want stream (the copy kept)", rep.Resumed)
	}
	got := rangeRows(t, w.conns["c2s0"])
	if len(got) != len(want) {
		t.Errorf("target has %d orders of the range; want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("order %s at the target: %q; want %q", k, got[k], v)
		}
	}
	assertNoReplication(t, w)
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	base := Config{MapFile: "m", From: "a", To: "b", Tables: []string{"accounts"}, Range: slots.Range{Lo: 1, Hi: 2}, Source: []Shard{{Name: "s", DSN: "x"}}, Target: []Shard{{Name: "t", DSN: "y"}}}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.MapFile = "" }, "MapFile"},
		{func(c *Config) { c.To = "a" }, "both"},
		{func(c *Config) { c.Range = slots.Range{Lo: 5, Hi: 2} }, "Range"},
		{func(c *Config) { c.Target = nil }, "Target"},
		{func(c *Config) { c.ChunkSlots = -1 }, "ChunkSlots"},
		{func(c *Config) { c.Target[0].DSN = "x" }, "same database"},
		{func(c *Config) { c.Tables = nil }, "database.tenant_tables"},
		{func(c *Config) { c.MaxFreezeLag = -time.Second }, "MaxFreezeLag must be >= 0"},
	} {
		c := base
		c.Target = append([]Shard(nil), base.Target...)
		tc.mut(&c)
		if _, err := Move(ctx, c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
}

func TestLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "layout.json")
	if err := os.WriteFile(path, []byte(`{"cells":{"cell-1":[{"name":"s0","dsn_env":"A_DSN","slots":[]}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"A_DSN": "postgres://x/y"}
	got, err := l.Shards("cell-1", func(k string) string { return env[k] })
	if err != nil || len(got) != 1 || got[0].DSN != "postgres://x/y" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := l.Shards("cell-1", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "A_DSN") {
		t.Errorf("unset variable: %v", err)
	}
	if _, err := l.Shards("cell-9", os.Getenv); err == nil {
		t.Error("unknown cell accepted")
	}
	if err := os.WriteFile(path, []byte(`{"cell":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLayout(path); err == nil {
		t.Error("unknown field accepted")
	}
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
