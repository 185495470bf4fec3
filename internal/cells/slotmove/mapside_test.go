package slotmove

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/slots"
)

// TestShardRangeState: a move between shards reads the range's owner and
// frozen mark from the cell's shard map record, and refuses, naming the
// shard or slots, a range split between shards, held by a third shard, or
// a shard the record does not list.
func TestShardRangeState(t *testing.T) {
	cfg := Config{Cell: "cell-1", From: "shard-0", To: "shard-1", Range: slots.Range{Lo: 4096, Hi: 8191}}
	rec := func(s0, s1 []string, frozen ...string) shardmap.Record {
		return shardmap.Record{Shards: []shardmap.ShardSlots{
			{Name: "shard-0", Slots: s0}, {Name: "shard-1", Slots: s1}, {Name: "shard-2", Slots: []string{"12288-16383"}},
		}, Frozen: frozen}
	}
	for _, c := range []struct {
		name   string
		rec    shardmap.Record
		owner  string
		frozen bool
		err    string
	}{
		{"at the source", rec([]string{"0-8191"}, []string{"8192-12287"}), "shard-0", false, ""},
		{"frozen at the source", rec([]string{"0-8191"}, []string{"8192-12287"}, "8000-8191"), "shard-0", true, ""},
		{"frozen elsewhere", rec([]string{"0-8191"}, []string{"8192-12287"}, "0-10"), "shard-0", false, ""},
		{"switched", rec([]string{"0-4095"}, []string{"4096-12287"}), "shard-1", false, ""},
		{"split", rec([]string{"0-6000"}, []string{"6001-12287"}), "", false, "split between shards shard-0 and shard-1"},
		{"third shard", shardmap.Record{Shards: []shardmap.ShardSlots{
			{Name: "shard-0", Slots: []string{"0-4095"}}, {Name: "shard-1", Slots: []string{"12288-16383"}}, {Name: "shard-2", Slots: []string{"4096-12287"}},
		}}, "", false, "on shard shard-2 of cell cell-1, neither shard-0 nor shard-1"},
		{"unknown shard", shardmap.Record{Shards: []shardmap.ShardSlots{{Name: "shard-0", Slots: []string{"0-16383"}}}}, "", false, `no shard "shard-1"`},
	} {
		owner, frozen, err := shardRangeState(c.rec, cfg)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case owner != c.owner || frozen != c.frozen:
			t.Errorf("%s: owner %q frozen %v, want %q %v", c.name, owner, frozen, c.owner, c.frozen)
		}
	}
}

// TestShardMoveConfig: a move between shards names its cell's control
// database and a state file, takes one shard per side, no routers, and no
// slot map file.
func TestShardMoveConfig(t *testing.T) {
	ok := Config{Cell: "cell-1", Control: Shard{Name: "cell-1/control", DSN: "postgres://c"}, StateFile: "s.json",
		From: "shard-0", To: "shard-1", Range: slots.Range{Lo: 1, Hi: 2}, ChunkSlots: 1,
		Source: []Shard{{Name: "shard-0", DSN: "postgres://a"}}, Target: []Shard{{Name: "shard-1", DSN: "postgres://b"}}, Tables: []string{"orders"}}
	if err := ok.withDefaults().validate(); err != nil {
		t.Fatalf("valid shard move: %v", err)
	}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Control = Shard{} }, "Config.Control is required"},
		{func(c *Config) { c.StateFile = "" }, "Config.StateFile is required"},
		{func(c *Config) { c.MapFile = "m.json" }, "exclude each other"},
		{func(c *Config) { c.Routers = []string{"http://r:1"} }, "not by routers"},
		{func(c *Config) { c.Target = append(c.Target, Shard{Name: "shard-2", DSN: "postgres://d"}) }, "one shard each"},
	} {
		cfg := ok
		c.change(&cfg)
		if err := cfg.withDefaults().validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}

// shardWorld is newWorld's cell-1 with its shard map in a control
// database: shard c1s0 holds 0-8191, c1s1 8192-16383. One stand-in
// process row reports a version far ahead with a heartbeat an hour ahead,
// so WaitApplied sees a live cell that applies every version (the real
// processes' side is tested in tests/slotmove_shards_test.go).
func shardWorld(t *testing.T) (*world, *pgx.Conn, Config) {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	ctlDSN := cluster.CreateDB(t, "ctl")
	if err := shardmap.Migrate(ctx, ctlDSN); err != nil {
		t.Fatal(err)
	}
	ctl, err := pgx.Connect(ctx, ctlDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close(context.Background()) })
	if _, _, err := shardmap.Seed(ctx, ctl, shardmap.Record{Shards: []shardmap.ShardSlots{
		{Name: "c1s0", Slots: []string{"0-8191"}}, {Name: "c1s1", Slots: []string{"8192-16383"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Exec(ctx, `INSERT INTO cellgate_shard_map_applied (process, version, heartbeat)
		VALUES ('stand-in', 1 << 40, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	src, dst := w.src[0], w.src[1]
	src.Slots, dst.Slots = nil, nil
	cfg := Config{
		Cell: "cell-1", Control: Shard{Name: "cell-1/control", DSN: ctlDSN}, StateFile: filepath.Join(t.TempDir(), "move.json"),
		Range: slots.Range{Lo: 4096, Hi: 8191}, From: "c1s0", To: "c1s1",
		Source: []Shard{src}, Target: []Shard{dst}, ChunkSlots: 1024, Tables: []string{"accounts", "orders"},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	return w, ctl, cfg
}

// TestShardMoveResumesSwitchedFrozen: a run that dies between the shard
// map's switch and its unfreeze (two writes, unlike a slot map file's
// one) leaves the range switched and frozen; the next run unfreezes it
// and finishes the move.
func TestShardMoveResumesSwitchedFrozen(t *testing.T) {
	ctx := context.Background()
	w, ctl, cfg := shardWorld(t)
	moving := tenantsIn(cfg.Range, 3)
	w.seed(t, append(moving, tenantsIn(slots.Range{Lo: 0, Hi: 4095}, 2)...), 4)
	crashed := cfg
	crashed.crash = func(point string) error {
		if point == "verified" {
			return errors.New("killed")
		}
		return nil
	}
	if _, err := Move(ctx, crashed); err == nil || err.Error() != "killed" {
		t.Fatalf("first run: %v", err)
	}
	// The dead run's switch, without its unfreeze.
	if _, err := shardmap.Switch(ctx, ctl, []slots.Range{cfg.Range}, cfg.To); err != nil {
		t.Fatal(err)
	}
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resumed != "delete" {
		t.Errorf("resumed at %q, want delete", rep.Resumed)
	}
	rec, _, err := shardmap.Read(ctx, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if owner, frozen, err := shardRangeState(rec, cfg); err != nil || owner != cfg.To || frozen {
		t.Errorf("shard map after the move: owner %q frozen %v (%v): %+v", owner, frozen, err, rec)
	}
	if n := count(t, w.conns["c1s0"], "orders", cfg.Range); n != 0 {
		t.Errorf("%d orders of the range left at the source", n)
	}
	if n := count(t, w.conns["c1s1"], "orders", cfg.Range); n != int64(4*len(moving)) {
		t.Errorf("%d orders of the range at the target, want %d", n, 4*len(moving))
	}
	if n := count(t, w.conns["c1s0"], "orders", slots.Range{Lo: 0, Hi: 4095}); n != 8 {
		t.Errorf("%d orders of the staying tenants at the source, want 8", n)
	}
}

// TestShardMoveAbort: a move between shards killed inside the freeze is
// listed by Status (its replication slot) and given up by Abort: slot
// dropped, range unfrozen on the source shard, the target's partial copy
// and the state file gone.
func TestShardMoveAbort(t *testing.T) {
	ctx := context.Background()
	w, ctl, cfg := shardWorld(t)
	w.seed(t, tenantsIn(cfg.Range, 2), 3)
	crashed := cfg
	crashed.crash = func(point string) error {
		if point == "fenced" {
			return errors.New("killed")
		}
		return nil
	}
	if _, err := Move(ctx, crashed); err == nil || err.Error() != "killed" {
		t.Fatalf("first run: %v", err)
	}
	rec, _, _ := shardmap.Read(ctx, ctl)
	if _, frozen, _ := shardRangeState(rec, cfg); !frozen {
		t.Fatalf("killed inside the freeze, the range is not frozen: %+v", rec)
	}
	if left, err := Status(ctx, cfg.Source); err != nil || len(left) != 1 {
		t.Fatalf("Status before the abort: %v %+v", err, left)
	}
	if err := Abort(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if left, err := Status(ctx, cfg.Source); err != nil || len(left) != 0 {
		t.Errorf("Status after the abort: %v %+v", err, left)
	}
	rec, _, _ = shardmap.Read(ctx, ctl)
	if owner, frozen, err := shardRangeState(rec, cfg); err != nil || owner != cfg.From || frozen {
		t.Errorf("shard map after the abort: owner %q frozen %v (%v)", owner, frozen, err)
	}
	if n := count(t, w.conns["c1s1"], "orders", cfg.Range); n != 0 {
		t.Errorf("%d orders of the range left at the target after the abort", n)
	}
	if _, err := os.Stat(cfg.StateFile); !os.IsNotExist(err) {
		t.Errorf("state file after the abort: %v", err)
	}
	// The source is writable again: the fence is gone.
	tn := tenantsIn(cfg.Range, 1)[0]
	if _, err := w.conns["c1s0"].Exec(ctx, `UPDATE orders SET note = 'after' WHERE tenant_id = $1`, tn); err != nil {
		t.Errorf("a write at the source after the abort: %v", err)
	}
}
