package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// This file checks the Rego slot-map rules against a plain per-slot Go
// reference on random maps, valid and broken, so that the range arithmetic
// of the fast paths (which never look at single slots) is proven against the
// obvious definition.

const nSlots = 16384

// refMap is the reference view of one slot map: which owner holds each slot
// (-1: none, -2: several), or why the map cannot be built.
type refMap struct {
	owner     [nSlots]int
	malformed bool // some spec does not parse or is out of range
	mixed     bool // some owners list slots, others none
	none      bool // no owners at all
}

var refSpec = regexp.MustCompile(`^([0-9]{1,5})(?:-([0-9]{1,5}))?$`)

func buildRef(lists [][]string) *refMap {
	m := &refMap{}
	for i := range m.owner {
		m.owner[i] = -1
	}
	if len(lists) == 0 {
		m.none = true
		return m
	}
	empty := 0
	for _, l := range lists {
		if len(l) == 0 {
			empty++
		}
	}
	if empty == len(lists) { // even split, in order
		q, r := nSlots/len(lists), nSlots%len(lists)
		lo := 0
		for i := range lists {
			size := q
			if i < r {
				size++
			}
			for s := lo; s < lo+size; s++ {
				m.owner[s] = i
			}
			lo += size
		}
		return m
	}
	if empty > 0 {
		m.mixed = true
		return m
	}
	for i, l := range lists {
		for _, spec := range l {
			sub := refSpec.FindStringSubmatch(spec)
			if sub == nil {
				m.malformed = true
				continue
			}
			lo, _ := strconv.Atoi(sub[1])
			hi := lo
			if sub[2] != "" {
				hi, _ = strconv.Atoi(sub[2])
			}
			if lo > hi || hi >= nSlots {
				m.malformed = true
				continue
			}
			for s := lo; s <= hi; s++ {
				if m.owner[s] == -1 {
					m.owner[s] = i
				} else {
					m.owner[s] = -2
				}
			}
		}
	}
	return m
}

// firstBad returns the first slot without exactly one owner, or -1.
func (m *refMap) firstBad() int {
	for s, o := range m.owner {
		if o < 0 {
			return s
		}
	}
	return -1
}

func (m *refMap) valid() bool {
	return !m.none && !m.mixed && !m.malformed && m.firstBad() < 0
}

// straddlers returns, for valid maps, each shard whose slots touch more
// than one cell, with those cells in index order.
func straddlers(shards, cells *refMap) map[int][]int {
	touch := map[int]map[int]bool{}
	for s := range nSlots {
		sh, c := shards.owner[s], cells.owner[s]
		if touch[sh] == nil {
			touch[sh] = map[int]bool{}
		}
		touch[sh][c] = true
	}
	out := map[int][]int{}
	for sh, cs := range touch {
		if len(cs) > 1 {
			for c := range cs {
				out[sh] = append(out[sh], c)
			}
			slices.Sort(out[sh])
		}
	}
	return out
}

// randomMap returns slot lists for n owners. Most maps are valid tilings cut
// at cuts; some are damaged in one of several ways.
func randomMap(rng *rand.Rand, n int, cuts []int) [][]string {
	lists := make([][]string, n)
	if rng.IntN(8) == 0 {
		return lists // even split
	}
	// Segments between cuts, each dealt to an owner; every owner gets one.
	var segs [][2]int
	for i := 0; i+1 < len(cuts); i++ {
		segs = append(segs, [2]int{cuts[i], cuts[i+1] - 1})
	}
	for i, sg := range segs {
		o := i
		if i >= n {
			o = rng.IntN(n)
		}
		lists[o] = append(lists[o], formatSpec(rng, sg[0], sg[1]))
	}
	switch rng.IntN(11) {
	case 0: // shift one cut by ±1: a one-slot gap or overlap
		o := rng.IntN(n)
		if len(lists[o]) > 0 {
			k := rng.IntN(len(lists[o]))
			lo, hi := parse(lists[o][k])
			if rng.IntN(2) == 0 && lo > 0 {
				lo--
			} else if hi < nSlots-1 {
				hi++
			} else if lo < hi {
				hi--
			}
			lists[o][k] = formatSpec(rng, lo, hi)
		}
	case 1: // drop a range
		o := rng.IntN(n)
		if len(lists[o]) > 1 {
			lists[o] = lists[o][1:]
		}
	case 2: // duplicate a range onto another owner
		a, b := rng.IntN(n), rng.IntN(n)
		if len(lists[a]) > 0 {
			lists[b] = append(lists[b], lists[a][0])
		}
	case 3: // something malformed
		o := rng.IntN(n)
		lists[o] = append(lists[o], []string{"9-3", "16384", "1..2", "0-16384"}[rng.IntN(4)])
	case 4: // an owner with no slots
		lists[rng.IntN(n)] = nil
	case 5: // the right slot count, but one slot past the end and a gap inside
		moved := false
		for _, l := range lists {
			for k, spec := range l {
				lo, hi := parse(spec)
				switch {
				case hi == nSlots-1:
					l[k] = formatSpec(rng, lo, hi+1)
				case !moved && lo < hi:
					l[k] = formatSpec(rng, lo, hi-1)
					moved = true
				}
			}
		}
	}
	for _, l := range lists {
		rng.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	}
	return lists
}

func formatSpec(rng *rand.Rand, lo, hi int) string {
	switch {
	case lo == hi && rng.IntN(2) == 0:
		return strconv.Itoa(lo)
	case rng.IntN(16) == 0:
		return fmt.Sprintf("%03d-%05d", lo, hi) // leading zeros: the slow parse
	default:
		return fmt.Sprintf("%d-%d", lo, hi)
	}
}

func parse(spec string) (int, int) {
	lo, hi, ok := strings.Cut(spec, "-")
	a, _ := strconv.Atoi(lo)
	if !ok {
		return a, a
	}
	b, _ := strconv.Atoi(hi)
	return a, b
}

func randomCuts(rng *rand.Rand, k int) []int {
	set := map[int]bool{0: true, nSlots: true}
	for len(set) < k+2 {
		set[1+rng.IntN(nSlots-1)] = true
	}
	var cuts []int
	for c := range set {
		cuts = append(cuts, c)
	}
	slices.Sort(cuts)
	return cuts
}

func TestSlotMapsMatchReference(t *testing.T) {
	e := newEvaluator(t)
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 400
	if raceEnabled {
		iters = 80
	}
	seen := map[string]int{}
	for iter := range iters {
		nShards, nCells := 1+rng.IntN(6), 1+rng.IntN(4)
		shardCuts := randomCuts(rng, nShards-1+rng.IntN(6))
		cellCuts := shardCuts // cells on shard boundaries: usually no straddle
		if rng.IntN(3) == 0 {
			cellCuts = randomCuts(rng, nCells-1+rng.IntN(3))
		} else if len(shardCuts) > 2 && rng.IntN(2) == 0 {
			// A subset of the shard boundaries: cell ranges span shards.
			cellCuts = []int{0}
			for _, c := range shardCuts[1 : len(shardCuts)-1] {
				if rng.IntN(2) == 0 {
					cellCuts = append(cellCuts, c)
				}
			}
			cellCuts = append(cellCuts, nSlots)
		}
		shardLists := randomMap(rng, nShards, shardCuts)
		cellLists := randomMap(rng, nCells, cellCuts)

		cfg := edit(t, func(cfg map[string]any) {
			var shards, cells []any
			for i, l := range shardLists {
				shards = append(shards, map[string]any{
					"name": fmt.Sprintf("s%d", i), "dsn_env": fmt.Sprintf("S%d", i),
					"slots": toAny(l), "max_conns": 10,
				})
			}
			for i, l := range cellLists {
				cells = append(cells, map[string]any{
					"name": fmt.Sprintf("c%d", i), "url": fmt.Sprintf("http://c%d", i), "slots": toAny(l),
				})
			}
			obj(cfg, "database")["shards"] = shards
			cfg["cells"] = cells
		})
		r, err := e.Eval(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		sm, cm := buildRef(shardLists), buildRef(cellLists)
		want := expectedSlotDenies(sm, cm, "database.shards", "shard", "cells", "cell")
		if got := slotDenies(r.Deny); !slices.Equal(got, want) {
			t.Fatalf("iteration %d\nshards %q\ncells %q\ngot  %q\nwant %q", iter, shardLists, cellLists, got, want)
		}
		if len(want) == 0 {
			seen["valid"]++
		}
		for _, w := range want {
			for _, kind := range []string{"straddles", "bad", "mixed", "malformed"} {
				if strings.Contains(w, " "+kind) {
					seen[kind]++
				}
			}
		}
	}
	// The generator must reach every outcome, or the comparison proves little.
	for _, kind := range []string{"valid", "straddles", "bad", "mixed", "malformed"} {
		if seen[kind] < iters/40 {
			t.Errorf("only %d maps with outcome %q; outcomes: %v", seen[kind], kind, seen)
		}
	}
	t.Logf("outcomes: %v", seen)
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

// slotDenies keeps the slot-map messages, cut down to what the reference
// can predict: the path and, for coverage, the first bad slot.
func slotDenies(deny []string) []string {
	var out []string
	for _, m := range deny {
		switch {
		case strings.Contains(m, "straddle"):
			path, rest, _ := strings.Cut(m, ": slots straddle cells ")
			cells, _, _ := strings.Cut(rest, ";")
			out = append(out, path+" straddles "+cells)
		case strings.Contains(m, "has no shard") || strings.Contains(m, "has no cell") || strings.Contains(m, " overlap "):
			out = append(out, coverageKey(m))
		case strings.Contains(m, "no slots while"):
			base, _, _ := strings.Cut(m, "[")
			out = append(out, base+" mixed")
		case strings.Contains(m, ".slots["):
			base, _, _ := strings.Cut(m, "[")
			out = append(out, base+" malformed")
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var firstSlot = regexp.MustCompile(`slots? ([0-9]+)`)

func coverageKey(m string) string {
	base, _, _ := strings.Cut(m, "[")
	base, _, _ = strings.Cut(base, ":")
	return fmt.Sprintf("%s bad at %s", base, firstSlot.FindStringSubmatch(m)[1])
}

func expectedSlotDenies(sm, cm *refMap, sBase, sNoun, cBase, cNoun string) []string {
	var out []string
	for _, x := range []struct {
		m          *refMap
		base, noun string
	}{{sm, sBase, sNoun}, {cm, cBase, cNoun}} {
		switch {
		case x.m.none:
			out = append(out, fmt.Sprintf("%s bad at 0", x.base))
		case x.m.mixed:
			out = append(out, x.base+" mixed")
		case x.m.malformed:
			out = append(out, x.base+" malformed")
		case x.m.firstBad() >= 0:
			out = append(out, fmt.Sprintf("%s bad at %d", x.base, x.m.firstBad()))
		}
	}
	if sm.valid() && cm.valid() {
		for sh, cs := range straddlers(sm, cm) {
			names := make([]string, len(cs))
			for i, c := range cs {
				names[i] = fmt.Sprintf("c%d", c)
			}
			out = append(out, fmt.Sprintf("database.shards[%d] (s%d) straddles %s", sh, sh, strings.Join(names, ", ")))
		}
	}
	slices.Sort(out)
	return out
}
