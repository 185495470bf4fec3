package shardmap

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/slots"
)

// twoShards is a record of two shards splitting the slots in half.
func twoShards() Record {
	return Record{Shards: []ShardSlots{
		{Name: "shard-0", Slots: []string{"0-8191"}},
		{Name: "shard-1", Slots: []string{"8192-16383"}},
	}}
}

var known = []string{"shard-0", "shard-1"}

func TestValidateRefusesBadRecords(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Record)
		want string
	}{
		{"unknown shard", func(r *Record) { r.Shards[1].Name = "shard-9" }, `shards[1].name: unknown shard "shard-9"`},
		{"overlap", func(r *Record) { r.Shards[1].Slots = []string{"8000-16383"} }, `shards[1] (shard-1).slots: "8000-16383" overlaps "shard-0"'s slots at slot 8000`},
		{"out of range", func(r *Record) { r.Shards[1].Slots = []string{"8192-16384"} }, `shards[1] (shard-1).slots`},
		{"gap", func(r *Record) { r.Shards[1].Slots = []string{"8200-16383"} }, `slots 8192-8199 have no shard`},
		{"twice", func(r *Record) { r.Shards[1].Name = "shard-0" }, `shards[1].name: "shard-0" is listed twice`},
		{"empty name", func(r *Record) { r.Shards[0].Name = "" }, `shards[0].name: empty`},
		{"frozen out of range", func(r *Record) { r.Frozen = []string{"16000-17000"} }, `frozen[0]`},
		{"no shards", func(r *Record) { r.Shards = nil }, `shards: empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := twoShards()
			c.edit(&r)
			err := r.Validate(known)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, c.want)
			}
			if _, err := r.Routing(1, known); err == nil {
				t.Fatal("Routing compiled a record Validate refuses")
			}
		})
	}
	if err := twoShards().Validate(known); err != nil {
		t.Fatalf("good record: %v", err)
	}
	// A shard with no slots left is fine: every range moved away.
	r := Record{Shards: []ShardSlots{{Name: "shard-0", Slots: []string{"0-16383"}}, {Name: "shard-1", Slots: []string{}}}}
	if err := r.Validate(known); err != nil {
		t.Fatalf("empty shard: %v", err)
	}
}

func TestFromConfigIsTheSpecsMap(t *testing.T) {
	rec, err := FromConfig(config.Database{Shards: []config.Shard{{Name: "a"}, {Name: "b"}}}) // even split
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Shards[0].Slots[0] + " " + rec.Shards[1].Slots[0]; got != "0-8191 8192-16383" {
		t.Fatalf("even split = %s", got)
	}
	if _, err := FromConfig(config.Database{Shards: []config.Shard{{Name: "a", Slots: []string{"0-10"}}}}); err == nil || !strings.Contains(err.Error(), "database.shards") {
		t.Fatalf("gap in config: %v", err)
	}
}

func TestFreezeSwitchUnfreezeOnTheRecord(t *testing.T) {
	rg := []slots.Range{{Lo: 4096, Hi: 8191}}
	if _, err := twoShards().Reassign(rg, "shard-1"); err == nil || !strings.Contains(err.Error(), "slot 4096 of 4096-8191 is not frozen") {
		t.Fatalf("switch of an unfrozen range: %v", err)
	}
	frozen, err := twoShards().WithFrozen(rg, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(frozen.Frozen, ",") != "4096-8191" {
		t.Fatalf("frozen = %v", frozen.Frozen)
	}
	if _, err := frozen.Reassign(rg, "shard-7"); err == nil || !strings.Contains(err.Error(), `unknown shard "shard-7"`) {
		t.Fatalf("switch to an unknown shard: %v", err)
	}
	if _, err := frozen.WithFrozen([]slots.Range{{Lo: 16000, Hi: 16384}}, true); err == nil {
		t.Fatal("froze a range past 16383")
	}
	switched, err := frozen.Reassign(rg, "shard-1")
	if err != nil {
		t.Fatal(err)
	}
	done, err := switched.WithFrozen(rg, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(done.Shards[0].Slots, ",") + " " + strings.Join(done.Shards[1].Slots, ","); got != "0-4095 4096-16383" || done.Frozen != nil {
		t.Fatalf("after the move: %s frozen %v", got, done.Frozen)
	}
	if done.ShardOf(5000) != "shard-1" || done.ShardOf(100) != "shard-0" || done.ShardOf(-1) != "" {
		t.Fatalf("ShardOf: %q %q", done.ShardOf(5000), done.ShardOf(100))
	}
}

func TestRoutingIndexesTheProcessShards(t *testing.T) {
	// The record lists shards in another order than database.shards: the
	// routing points at the process's indexes.
	rec := Record{Shards: []ShardSlots{
		{Name: "shard-1", Slots: []string{"0-99"}},
		{Name: "shard-0", Slots: []string{"100-16383"}},
	}, Frozen: []string{"50-60", "55-70"}}
	r, err := rec.Routing(7, known)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != 7 || r.Shard(0) != 1 || r.Shard(100) != 0 || !r.Frozen(70) || r.Frozen(71) || r.Frozen(49) {
		t.Fatalf("routing: version %d shard(0)=%d shard(100)=%d", r.Version(), r.Shard(0), r.Shard(100))
	}
	if got := r.FrozenRanges(); len(got) != 1 || got[0] != (slots.Range{Lo: 50, Hi: 70}) {
		t.Fatalf("frozen ranges = %v", got)
	}
}

func TestJobMiddlewareSnoozesFrozenSlots(t *testing.T) {
	set := openSet(t)
	tenant := "acme" // only its own slot is frozen
	slot, _ := slots.Slot(tenant)
	rec, _ := twoShards().WithFrozen([]slots.Range{{Lo: slot, Hi: slot}}, true)
	r, err := rec.Routing(2, known)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Install(r); err != nil {
		t.Fatal(err)
	}
	ran := 0
	work := JobMiddleware(set, time.Second)(func(context.Context, *jobs.JobRow) error { ran++; return nil })
	if err := work(context.Background(), &jobs.JobRow{Tenant: tenant}); err == nil || err.Error() != jobs.Snooze(time.Second).Error() || ran != 0 {
		t.Fatalf("frozen tenant's job: err %v, ran %d; want a snooze without running", err, ran)
	}
	for _, other := range []string{"", "globex"} {
		if err := work(context.Background(), &jobs.JobRow{Tenant: other}); err != nil {
			t.Fatalf("job of %q: %v", other, err)
		}
	}
	if ran != 2 {
		t.Fatalf("ran %d jobs, want 2", ran)
	}
}

// openSet is a Set over two shards whose pools never connect (pools
// connect lazily): enough to route.
func openSet(t testing.TB) *shards.Set {
	t.Helper()
	set, err := shards.Open(context.Background(), config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "X"},
		Shards: []config.Shard{
			{Name: "shard-0", DSNEnv: "X", Slots: []string{"0-8191"}},
			{Name: "shard-1", DSNEnv: "X", Slots: []string{"8192-16383"}},
		},
	}, func(string) string { return "postgres://x@127.0.0.1:1/none" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	return set
}
