package slotmove

import (
	"strings"
	"testing"

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
