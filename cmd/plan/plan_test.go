package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
)

// twoCells is the example spec on two cells split after slot split, over
// three shards.
func twoCells(split int) config.Config {
	c := spec.Config()
	c.Cells = []config.Cell{
		{Name: "cell-1", URL: "http://a:8080", Slots: []string{"0-" + strconv.Itoa(split)}},
		{Name: "cell-2", URL: "http://b:8080", Slots: []string{strconv.Itoa(split+1) + "-16383"}},
	}
	c.Database.Shards = []config.Shard{
		{Name: "shard-0", DSNEnv: "S0", Slots: []string{"0-4095"}, MaxConns: 10},
		{Name: "shard-1", DSNEnv: "S1", Slots: []string{"4096-8191"}, MaxConns: 10},
		{Name: "shard-2", DSNEnv: "S2", Slots: []string{"8192-16383"}, MaxConns: 10},
	}
	return c
}

func has(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestPlanKnownActions: pairs of specs with known operator actions.
func TestPlanKnownActions(t *testing.T) {
	same := spec.Config()
	p, err := Compare(same, spec.Config())
	if err != nil || len(p.Actions) != 0 || len(p.Changes) != 0 {
		t.Fatalf("identical specs: %+v %v", p, err)
	}

	// A cell boundary moves from 8191 to 4095: slots 4096-8191 change cell.
	p, err = Compare(twoCells(8191), twoCells(4095))
	if err != nil {
		t.Fatal(err)
	}
	if !has(p.Actions, "slots 4096-8191 move from cell cell-1 to cell cell-2: slotmove -map gen/deploy/slotmap.json -layout <layout.json> -slots 4096-8191 -from cell-1 -to cell-2") || len(p.Actions) != 1 {
		t.Errorf("cell move: %q", p.Actions)
	}
	if !has(p.Changes["cell-1"], "cells[0].slots[0]: \"0-8191\" → \"0-4095\"") {
		t.Errorf("cell-1 changes: %q", p.Changes["cell-1"])
	}

	// A shard split: shard-2's upper half goes to a new shard-3 with its
	// own DSN variable.
	old := twoCells(8191)
	cur := twoCells(8191)
	cur.Database.Shards[2].Slots = []string{"8192-12287"}
	cur.Database.Shards = append(cur.Database.Shards, config.Shard{Name: "shard-3", DSNEnv: "S3", Slots: []string{"12288-16383"}, MaxConns: 10})
	p, err = Compare(old, cur)
	if err != nil {
		t.Fatal(err)
	}
	if !has(p.Actions, "slots 12288-16383 move from shard shard-2 to shard shard-3") || !has(p.Actions, "set S3 in every cell's environment") {
		t.Errorf("shard split: %q", p.Actions)
	}
	if has(p.Actions, "-from cell") {
		t.Errorf("a shard split inside one cell needs no move between cells: %q", p.Actions)
	}
	// A shard split is moved by slotmove's shard mode, after deploying.
	for _, step := range []string{
		"slots 12288-16383 move from shard shard-2 to shard shard-3 in cell cell-2: deploy this spec first",
		"(cell cell-2 keeps serving the range from shard-2",
		"slotmove -layout <layout.json> -cell cell-2 -from-shard shard-2 -to-shard shard-3 -slots 12288-16383",
	} {
		if !has(p.Actions, step) {
			t.Errorf("shard split: no %q in %q", step, p.Actions)
		}
	}
	if has(p.Actions, "copy their tenants' rows before deploying") {
		t.Errorf("shard split inside one cell: the old advice is still printed: %q", p.Actions)
	}

	// A DSN variable vanishes with a removed shard.
	p, _ = Compare(cur, old)
	if !has(p.Actions, "S3 is no longer read") {
		t.Errorf("removed shard: %q", p.Actions)
	}

	// Lanes 4×2 → 8×2: most tenants get new lanes; 0% for no change.
	a, b := spec.Config(), spec.Config()
	a.Jobs.Tenants = config.JobTenants{Lanes: 4, LanesPerTenant: 2}
	b.Jobs.Tenants = config.JobTenants{Lanes: 8, LanesPerTenant: 2}
	p, _ = Compare(a, b)
	if !has(p.Actions, "jobs.tenants: lanes 4×2 → 8×2;") || !has(p.Actions, "% of tenants get new lanes") || has(p.Actions, " 0.0% of tenants") {
		t.Errorf("lanes: %q", p.Actions)
	}

	// Caps: a lowered cap and a cap set where there was none are actions;
	// a raised cap is only a change.
	a, b = spec.Config(), spec.Config()
	a.Tenancy.MaxDBConnections, b.Tenancy.MaxDBConnections = 8, 4
	b.Tenancy.MaxConcurrentRequests = 16
	b.Server.BodyLimitBytes = a.Server.BodyLimitBytes * 2
	p, _ = Compare(a, b)
	if !has(p.Actions, "tenancy.max_db_connections lowered 8 → 4") || !has(p.Actions, "tenancy.max_concurrent_requests lowered 0 (no limit) → 16") || has(p.Actions, "body_limit_bytes") || len(p.Actions) != 2 {
		t.Errorf("caps: %q", p.Actions)
	}
	if !has(p.Changes["cell-1"], "server.body_limit_bytes") {
		t.Errorf("raised cap not shown as a change: %q", p.Changes)
	}
}
