package shards

import (
	"context"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

func twoShards() config.Database {
	return config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "CONTROL_DSN", MaxConns: 2},
		Shards: []config.Shard{
			{Name: "shard-0", DSNEnv: "S0_DSN", Slots: []string{"0-8191"}, MaxConns: 2},
			{Name: "shard-1", DSNEnv: "S1_DSN", Slots: []string{"8192-16383"}, MaxConns: 2},
		},
	}
}

func TestOpenNamesUnsetVariable(t *testing.T) {
	env := map[string]string{"CONTROL_DSN": "postgres://x@127.0.0.1:1/db"}
	_, err := Open(context.Background(), twoShards(), func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "S0_DSN") || !strings.Contains(err.Error(), "shard-0") {
		t.Fatalf("err = %v, want one naming S0_DSN and shard-0", err)
	}
}

func TestOpenRejectsBadSlotMap(t *testing.T) {
	db := twoShards()
	db.Shards[1].Slots = []string{"8000-16383"}
	_, err := Open(context.Background(), db, func(string) string { return "postgres://x@127.0.0.1:1/db" })
	if err == nil || !strings.Contains(err.Error(), "database.shards") {
		t.Fatalf("err = %v, want an overlap error naming database.shards", err)
	}
}

func TestForTenantUsesTheSharedSlotFunction(t *testing.T) {
	set, err := Open(context.Background(), twoShards(), func(string) string { return "postgres://x@127.0.0.1:1/db" })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// 123456789 → slot 12739 (shard-1); {user1}.following → 8106 (shard-0).
	for key, want := range map[string]string{"123456789": "shard-1", "{user1}.following": "shard-0"} {
		sh, slot, err := set.ForTenant(key)
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := slots.Slot(key); s != slot || sh.Name != want {
			t.Errorf("ForTenant(%q) = %s slot %d; want %s slot %d", key, sh.Name, slot, want, s)
		}
	}
	if _, _, err := set.ForTenant(""); err != ErrNoTenant {
		t.Fatalf("empty tenant: %v", err)
	}
}

func TestPing(t *testing.T) {
	ctx := context.Background()
	env := map[string]string{
		"CONTROL_DSN": testpg.CreateDB(t, "control"),
		"S0_DSN":      testpg.CreateDB(t, "s0"),
		"S1_DSN":      testpg.CreateDB(t, "s1"),
	}
	set, err := Open(ctx, twoShards(), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCellOpensOnlyItsShards(t *testing.T) {
	cells := []config.Cell{{Name: "cell-1", Slots: []string{"0-8191"}}, {Name: "cell-2", Slots: []string{"8192-16383"}}}
	env := map[string]string{"CONTROL_DSN": "postgres://x@127.0.0.1:1/db", "S1_DSN": "postgres://x@127.0.0.1:1/db"}
	set, err := OpenCell(context.Background(), twoShards(), cells, "cell-2", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err) // S0_DSN is unset, so opening shard-0 would have failed
	}
	defer set.Close()
	if len(set.Shards()) != 1 || set.Shards()[0].Name != "shard-1" {
		t.Fatalf("cell-2 opened %d shards", len(set.Shards()))
	}
	if _, _, err := set.ForTenant("123456789"); err != nil { // slot 12739
		t.Fatalf("own tenant: %v", err)
	}
	if _, _, err := set.ForTenant("{user1}.following"); err != ErrOtherCell { // slot 8106
		t.Fatalf("other cell's tenant: %v", err)
	}
	if err := set.Accessor("{user1}.following", nil).Err(); err != ErrOtherCell {
		t.Fatalf("other cell's tenant's accessor: %v", err)
	}
	bad := []config.Cell{{Name: "cell-1", Slots: []string{"0-4000"}}, {Name: "cell-2", Slots: []string{"4001-16383"}}}
	if _, err := OpenCell(context.Background(), twoShards(), bad, "cell-1", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "straddle") {
		t.Fatalf("straddling shard: %v", err)
	}
	if _, err := OpenCell(context.Background(), twoShards(), cells, "cell-9", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "server.cell") {
		t.Fatalf("unknown cell: %v", err)
	}
}

func TestInstallSwapsTheRouting(t *testing.T) {
	set, err := Open(context.Background(), twoShards(), func(string) string { return "postgres://x@127.0.0.1:1/db" })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// {user1}.following is slot 8106, on shard-0 in the config's map.
	if set.Routing().Version() != 0 || set.Frozen("{user1}.following") {
		t.Fatalf("boot routing: version %d", set.Routing().Version())
	}
	everything1, err := NewRouting(3, func(int) int { return 1 }, []slots.Range{{Lo: 8106, Hi: 8106}})
	if err != nil {
		t.Fatal(err)
	}
	boot := set.Routing()
	boot.Enter() // a request in flight on the boot map
	set.Routing().Enter()
	set.Routing().Leave()
	if err := set.Install(everything1); err != nil {
		t.Fatal(err)
	}
	everything1.Enter() // on the map in force: not an older one
	if n := set.OlderInFlight(); n != 1 {
		t.Fatalf("older in flight = %d, want 1", n)
	}
	boot.Leave()
	everything1.Leave()
	if n := set.OlderInFlight(); n != 0 || set.retired.Len() != 0 {
		t.Fatalf("older in flight = %d (%d maps kept), want 0", n, set.retired.Len())
	}
	sh, _, err := set.ForTenant("{user1}.following")
	if err != nil || sh.Name != "shard-1" || !set.Frozen("{user1}.following") || set.Frozen("123456789") || set.Frozen("") {
		t.Fatalf("after install: %v %v", sh, err)
	}
	bad, err := NewRouting(4, func(int) int { return 2 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Install(bad); err == nil || !strings.Contains(err.Error(), "shard index 2") || set.Routing().Version() != 3 {
		t.Fatalf("install of an index past database.shards: %v (version %d in force)", err, set.Routing().Version())
	}
	if _, err := NewRouting(5, func(int) int { return 0 }, []slots.Range{{Lo: 10, Hi: 16384}}); err == nil {
		t.Fatal("NewRouting took a frozen range past the last slot")
	}
}
