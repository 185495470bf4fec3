package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/slots"
)

// Plan is the difference between two specs: what changes in each cell's
// effective config and what an operator must do about it.
type Plan struct {
	// Changes maps a cell name to its changed settings ("path: old → new").
	Changes map[string][]string
	// Actions are the operator steps, in a fixed order.
	Actions []string
}

// laneSample is how many tenant ids estimate the share that get new lanes.
const laneSample = 10000

// Compare computes the plan from old to cur.
func Compare(old, cur config.Config) (Plan, error) {
	p := Plan{Changes: map[string][]string{}}
	oldCells, err := perCell(old)
	if err != nil {
		return p, fmt.Errorf("base: %w", err)
	}
	curCells, err := perCell(cur)
	if err != nil {
		return p, err
	}
	for _, name := range slices.Sorted(maps.Keys(union(oldCells, curCells))) {
		if d := diff(oldCells[name], curCells[name]); len(d) > 0 {
			p.Changes[name] = d
		}
	}
	moves, err := slotMoves(old, cur)
	if err != nil {
		return p, err
	}
	p.Actions = append(p.Actions, moves...)
	p.Actions = append(p.Actions, laneChange(old.Jobs.Tenants, cur.Jobs.Tenants)...)
	p.Actions = append(p.Actions, dsnChanges(old, cur)...)
	p.Actions = append(p.Actions, capsLowered(old, cur)...)
	return p, nil
}

// Print writes the plan for people.
func (p Plan) Print(w io.Writer) {
	if len(p.Changes) == 0 {
		fmt.Fprintln(w, "no effective-config change")
	}
	for _, name := range slices.Sorted(maps.Keys(p.Changes)) {
		fmt.Fprintf(w, "cell %s:\n", name)
		for _, c := range p.Changes[name] {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
	if len(p.Actions) == 0 {
		fmt.Fprintln(w, "actions: none")
		return
	}
	fmt.Fprintln(w, "actions:")
	for _, a := range p.Actions {
		fmt.Fprintf(w, "  - %s\n", a)
	}
}

// perCell is each cell's effective config as flat "path → JSON value"
// pairs: the spec with the cell's deploy file applied.
func perCell(cfg config.Config) (map[string]map[string]string, error) {
	files, err := cells.DeployFiles(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	base := cfg.JSON()
	for _, c := range cfg.Cells {
		merged, err := config.Merge(base, files[cells.DeployDir+"/"+c.Name+".json"])
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal(merged, &v); err != nil {
			return nil, err
		}
		flat := map[string]string{}
		flatten("", v, flat)
		out[c.Name] = flat
	}
	return out, nil
}

func flatten(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
}

func union[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func diff(a, b map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(union(a, b))) {
		x, okA := a[k]
		y, okB := b[k]
		switch {
		case !okA:
			out = append(out, fmt.Sprintf("%s: (none) → %s", k, y))
		case !okB:
			out = append(out, fmt.Sprintf("%s: %s → (none)", k, x))
		case x != y:
			out = append(out, fmt.Sprintf("%s: %s → %s", k, x, y))
		}
	}
	return out
}

// owners maps every slot to its (cell, shard) names.
func owners(cfg config.Config) ([slots.MaxSlot + 1][2]string, error) {
	var out [slots.MaxSlot + 1][2]string
	for k, list := range [][]slots.Owner{cellOwners(cfg), shardOwners(cfg)} {
		m, err := slots.Build(list)
		if err != nil {
			return out, err
		}
		for s := range out {
			out[s][k] = m.Name(m.Owner(s))
		}
	}
	return out, nil
}

func cellOwners(cfg config.Config) []slots.Owner {
	out := make([]slots.Owner, len(cfg.Cells))
	for i, c := range cfg.Cells {
		out[i] = slots.Owner{Name: c.Name, Slots: c.Slots}
	}
	return out
}

func shardOwners(cfg config.Config) []slots.Owner {
	out := make([]slots.Owner, len(cfg.Database.Shards))
	for i, s := range cfg.Database.Shards {
		out[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	return out
}

// slotMoves lists each run of slots whose cell or shard changes, each
// with its slotmove command: between cells, or between two shards of one
// cell.
func slotMoves(old, cur config.Config) ([]string, error) {
	a, err := owners(old)
	if err != nil {
		return nil, fmt.Errorf("base slot maps: %w", err)
	}
	b, err := owners(cur)
	if err != nil {
		return nil, err
	}
	var out []string
	for lo := 0; lo <= slots.MaxSlot; {
		if a[lo] == b[lo] {
			lo++
			continue
		}
		hi := lo
		for hi+1 <= slots.MaxSlot && a[hi+1] == a[lo] && b[hi+1] == b[lo] {
			hi++
		}
		rg := slots.Range{Lo: lo, Hi: hi}
		if a[lo][0] != b[lo][0] {
			out = append(out, fmt.Sprintf("slots %s move from cell %s to cell %s: slotmove -map gen/deploy/slotmap.json -layout <layout.json> -slots %s -from %s -to %s",
				rg, a[lo][0], b[lo][0], rg, a[lo][0], b[lo][0]))
		}
		switch {
		case a[lo][1] == b[lo][1]:
		case a[lo][0] == b[lo][0]:
			out = append(out, shardMoveSteps(rg, b[lo][0], a[lo][1], b[lo][1]))
		default:
			out = append(out, fmt.Sprintf("slots %s move from shard %s to shard %s: copy their tenants' rows before deploying", rg, a[lo][1], b[lo][1]))
		}
		lo = hi + 1
	}
	return out, nil
}

// shardMoveSteps is the procedure for a range that changes shard inside
// one cell. The cell's control database holds its shard map
// (internal/shardmap), which wins over database.shards once written, so
// the spec is deployed first (the new shard's pool opens and joins the
// map with no slots, the range stays where it is), then slotmove moves
// the range and switches the map.
func shardMoveSteps(rg slots.Range, cell, from, to string) string {
	return fmt.Sprintf("slots %s move from shard %s to shard %s in cell %s: deploy this spec first "+
		"(cell %s keeps serving the range from %s: its control database's shard map wins over database.shards), then "+
		"slotmove -layout <layout.json> -cell %s -from-shard %s -to-shard %s -slots %s",
		rg, from, to, cell, cell, from, cell, from, to, rg)
}

// laneChange reports a shuffle-shard change and the share of tenants whose
// lane set differs, estimated over laneSample tenant ids.
func laneChange(old, cur config.JobTenants) []string {
	if old.Lanes == cur.Lanes && old.LanesPerTenant == cur.LanesPerTenant {
		return nil
	}
	moved := 0
	for i := range laneSample {
		id := fmt.Sprintf("tenant-%d", i)
		if !slices.Equal(lanesOf(id, old), lanesOf(id, cur)) {
			moved++
		}
	}
	return []string{fmt.Sprintf("jobs.tenants: lanes %d×%d → %d×%d; %.1f%% of tenants get new lanes (their queued jobs drain on the old workers first)",
		old.Lanes, old.LanesPerTenant, cur.Lanes, cur.LanesPerTenant, 100*float64(moved)/laneSample)}
}

func lanesOf(id string, t config.JobTenants) []int {
	if t.Lanes <= 0 || t.LanesPerTenant <= 0 {
		return nil
	}
	return jobs.ShuffleShard(id, t.Lanes, t.LanesPerTenant)
}

// dsnChanges lists the DSN variables a deploy must set or may remove.
func dsnChanges(old, cur config.Config) []string {
	a, b := dsnVars(old), dsnVars(cur)
	var out []string
	for _, v := range slices.Sorted(maps.Keys(b)) {
		if !a[v] {
			out = append(out, fmt.Sprintf("set %s in every cell's environment before deploying (a new database)", v))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(a)) {
		if !b[v] {
			out = append(out, fmt.Sprintf("%s is no longer read; remove it after the deploy (and retire its database once empty)", v))
		}
	}
	return out
}

func dsnVars(cfg config.Config) map[string]bool {
	out := map[string]bool{cfg.Database.Control.DSNEnv: true}
	for _, s := range cfg.Database.Shards {
		out[s.DSNEnv] = true
	}
	return out
}

// capsLowered lists the limits that get stricter: a lowered cap refuses
// load the old one admitted (0 means no limit, so 0 → N is lowering too).
func capsLowered(old, cur config.Config) []string {
	caps := func(c config.Config) map[string]float64 {
		m := map[string]float64{
			"server.max_concurrent_requests":  float64(c.Server.MaxConcurrentRequests),
			"server.body_limit_bytes":         float64(c.Server.BodyLimitBytes),
			"tenancy.max_concurrent_requests": float64(c.Tenancy.MaxConcurrentRequests),
			"tenancy.max_db_connections":      float64(c.Tenancy.MaxDBConnections),
			"tenancy.rate_per_second":         c.Tenancy.RatePerSecond,
			"tenancy.burst":                   float64(c.Tenancy.Burst),
			"jobs.tenants.max_concurrent":     float64(c.Jobs.Tenants.MaxConcurrent),
			"admission.funding":               float64(c.Admission.Funding),
			"database.control.max_conns":      float64(c.Database.Control.MaxConns),
		}
		for _, s := range c.Database.Shards {
			m["database.shards("+s.Name+").max_conns"] = float64(s.MaxConns)
		}
		for _, k := range c.Jobs.Kinds {
			m["jobs.kinds("+k.Name+").concurrency"] = float64(k.Concurrency)
		}
		return m
	}
	a, b := caps(old), caps(cur)
	var out []string
	keys := slices.Collect(maps.Keys(a))
	sort.Strings(keys)
	for _, k := range keys {
		x, y := a[k], b[k]
		if _, ok := b[k]; !ok {
			continue
		}
		if y > 0 && (x == 0 || y < x) {
			out = append(out, fmt.Sprintf("%s lowered %s → %s: check current load fits before deploying", k, capText(x), capText(y)))
		}
	}
	return out
}

func capText(v float64) string {
	if v == 0 {
		return "0 (no limit)"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
