package console_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/slots"
)

// TestSlotsFollowShardMap: after a move between the cell's shards the
// cells page, the slots report and the tenants view show the shard map in
// force (version, frozen ranges, each shard's slots, a tenant's shard),
// not the spec's database.shards.
func TestSlotsFollowShardMap(t *testing.T) {
	t.Parallel()
	// The spec splits the slots evenly: shard-0 0-8191, shard-1 8192-16383.
	// The map in force has moved 4096-8191 to shard-1 and freezes 100-199.
	var moved atomic.Bool
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) {
		c.ShardMap = func() console.ShardMap {
			if !moved.Load() {
				return console.ShardMap{} // nothing installed yet: the spec's map
			}
			return console.ShardMap{Version: 7, Owner: func(s int) int {
				if s < 4096 {
					return 0
				}
				return 1
			}, Frozen: []slots.Range{{Lo: 100, Hi: 199}}}
		}
	}})
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if s, _ := slots.Slot(fmt.Sprint("tenant-", i)); s >= 4096 && s < 8192 {
			tenant = fmt.Sprint("tenant-", i)
		}
	}
	env.Rejections.Add(tenant)
	report := func() (console.SlotReport, string) {
		var s console.SlotReport
		if st, body := call(t, "GET", env.URL+"/admin/api/slots", consoletest.AdminToken, &s); st != http.StatusOK {
			t.Fatalf("slots = %d %s", st, body)
		}
		var tr console.TenantsReport
		call(t, "GET", env.URL+"/admin/api/tenants", consoletest.AdminToken, &tr)
		if len(tr.Tenants) != 1 {
			t.Fatalf("tenants = %+v, want %s", tr.Tenants, tenant)
		}
		return s, tr.Tenants[0].Shard
	}

	s, shard := report()
	if s.Version != 0 || len(s.Frozen) != 0 || !slices.Equal(s.Shards[0].Slots, []string{"0-8191"}) || shard != "shard-0" {
		t.Errorf("before a map is installed: slots %+v, %s on %s; want the spec's map", s, tenant, shard)
	}
	moved.Store(true)
	s, shard = report()
	if s.Version != 7 || !slices.Equal(s.Frozen, []string{"100-199"}) {
		t.Errorf("version %d frozen %v, want 7 and 100-199", s.Version, s.Frozen)
	}
	if !slices.Equal(s.Shards[0].Slots, []string{"0-4095"}) || s.Shards[0].Count != 4096 ||
		!slices.Equal(s.Shards[1].Slots, []string{"4096-16383"}) || s.Shards[1].Count != 12288 {
		t.Errorf("shards = %+v, want shard-0 0-4095 and shard-1 4096-16383", s.Shards)
	}
	if shard != "shard-1" {
		t.Errorf("%s (slot in 4096-8191) is on %s, want shard-1, where the map in force puts it", tenant, shard)
	}
	b := newBrowser(t)
	b.post(env.URL+"/admin/login", map[string][]string{"token": {consoletest.AdminToken}})
	if _, body := b.get(env.URL + "/admin/cells"); !strings.Contains(body, "Shard map version 7") || !strings.Contains(body, "frozen for a move: 100-199") || !strings.Contains(body, "4096-16383") {
		t.Errorf("cells page lacks the map in force:\n%s", body)
	}
}
