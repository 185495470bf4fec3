package shardmap

import (
	"fmt"
	"slices"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/slots"
)

// Record is the shard map as the control database stores it (JSON):
//
//	{"shards": [{"name": "shard-0", "slots": ["0-8191"]},
//	            {"name": "shard-1", "slots": ["8192-16383"]}],
//	 "frozen": ["4096-4200"]}
//
// Every slot belongs to exactly one shard; a shard may hold none (every
// range moved away). Frozen slots are being moved: the cell refuses their
// tenants' requests with 503 and Retry-After: 1.
type Record struct {
	// Shards are the cell's shards in spec order, each with its slots.
	Shards []ShardSlots `json:"shards"`
	// Frozen lists slot specs being moved between shards.
	Frozen []string `json:"frozen,omitempty"`
}

// ShardSlots is one shard's entry of a Record.
type ShardSlots struct {
	// Name is the shard's name in database.shards.
	Name string `json:"name"`
	// Slots are slot specs ("0-8191", "42").
	Slots []string `json:"slots"`
}

// FromConfig is the map of database.shards: what a cell serves before any
// record exists, and the record the first process writes.
func FromConfig(db config.Database) (Record, error) {
	owners := make([]slots.Owner, len(db.Shards))
	for i, s := range db.Shards {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	m, err := slots.Build(owners)
	if err != nil {
		return Record{}, fmt.Errorf("database.shards: %w", err)
	}
	rec := Record{Shards: make([]ShardSlots, m.Len())}
	for i := range rec.Shards {
		rec.Shards[i] = ShardSlots{Name: m.Name(i), Slots: m.Specs(i)}
	}
	return rec, nil
}

// compiled is a checked record: each slot's index into Shards, and the
// frozen slots.
type compiled struct {
	owner  [slots.Count]int
	frozen [slots.Count]bool
}

// compile checks the record and returns its lookup tables. known, when not
// nil, are the shard names a process can serve (database.shards); a shard
// outside it is an error. Errors name the field and the value.
func (r Record) compile(known []string) (*compiled, error) {
	if len(r.Shards) == 0 {
		return nil, fmt.Errorf("shard map: shards: empty; every slot needs a shard")
	}
	c := &compiled{}
	for s := range c.owner {
		c.owner[s] = -1
	}
	seen := map[string]bool{}
	for i, sh := range r.Shards {
		switch {
		case sh.Name == "":
			return nil, fmt.Errorf("shard map: shards[%d].name: empty", i)
		case seen[sh.Name]:
			return nil, fmt.Errorf("shard map: shards[%d].name: %q is listed twice", i, sh.Name)
		case known != nil && !slices.Contains(known, sh.Name):
			return nil, fmt.Errorf("shard map: shards[%d].name: unknown shard %q; database.shards has %q", i, sh.Name, known)
		}
		seen[sh.Name] = true
		for _, spec := range sh.Slots {
			rg, err := slots.ParseSpec(spec)
			if err != nil {
				return nil, fmt.Errorf("shard map: shards[%d] (%s).slots: %w", i, sh.Name, err)
			}
			for s := rg.Lo; s <= rg.Hi; s++ {
				if o := c.owner[s]; o >= 0 {
					return nil, fmt.Errorf("shard map: shards[%d] (%s).slots: %q overlaps %q's slots at slot %d", i, sh.Name, spec, r.Shards[o].Name, s)
				}
				c.owner[s] = i
			}
		}
	}
	for s := 0; s < slots.Count; s++ {
		if c.owner[s] < 0 {
			e := s
			for e < slots.MaxSlot && c.owner[e+1] < 0 {
				e++
			}
			return nil, fmt.Errorf("shard map: shards: slots %s have no shard; every slot 0-%d needs one", slots.Range{Lo: s, Hi: e}, slots.MaxSlot)
		}
	}
	for i, spec := range r.Frozen {
		rg, err := slots.ParseSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("shard map: frozen[%d]: %w", i, err)
		}
		for s := rg.Lo; s <= rg.Hi; s++ {
			c.frozen[s] = true
		}
	}
	return c, nil
}

// Validate checks the record: every slot 0..16383 in exactly one shard,
// specs that parse, shard names unique and, when known is not nil, among
// known.
func (r Record) Validate(known []string) error {
	_, err := r.compile(known)
	return err
}

// record rebuilds the canonical record from c over r's shard names.
func (c *compiled) record(names []string) Record {
	out := Record{Shards: make([]ShardSlots, len(names))}
	for i, n := range names {
		out.Shards[i] = ShardSlots{Name: n, Slots: specsWhere(func(s int) bool { return c.owner[s] == i })}
	}
	out.Frozen = specsWhere(func(s int) bool { return c.frozen[s] })
	return out
}

// specsWhere returns the canonical specs of the slots where in holds.
func specsWhere(in func(slot int) bool) []string {
	out := []string{}
	for s := 0; s < slots.Count; s++ {
		if !in(s) {
			continue
		}
		e := s
		for e < slots.MaxSlot && in(e+1) {
			e++
		}
		out = append(out, slots.Range{Lo: s, Hi: e}.String())
		s = e
	}
	return out
}

// names lists the record's shard names in order.
func (r Record) names() []string {
	out := make([]string, len(r.Shards))
	for i, sh := range r.Shards {
		out[i] = sh.Name
	}
	return out
}

// Normalize checks r and returns it in canonical form: merged, sorted
// specs on every shard and in Frozen (nil when nothing is frozen).
func (r Record) Normalize() (Record, error) {
	c, err := r.compile(nil)
	if err != nil {
		return Record{}, err
	}
	out := c.record(r.names())
	if len(out.Frozen) == 0 {
		out.Frozen = nil
	}
	return out, nil
}

// ShardOf returns the name of the shard that holds slot, "" when r does
// not check out or slot is outside 0..16383.
func (r Record) ShardOf(slot int) string {
	c, err := r.compile(nil)
	if err != nil || uint(slot) >= slots.Count {
		return ""
	}
	return r.Shards[c.owner[slot]].Name
}

// WithFrozen returns r (normalized) with ranges added to (freeze true) or
// removed from (false) the frozen slots.
func (r Record) WithFrozen(ranges []slots.Range, freeze bool) (Record, error) {
	c, err := r.compile(nil)
	if err != nil {
		return Record{}, err
	}
	for _, rg := range ranges {
		if err := checkRange(rg); err != nil {
			return Record{}, err
		}
		for s := rg.Lo; s <= rg.Hi; s++ {
			c.frozen[s] = freeze
		}
	}
	return canonical(c, r.names()), nil
}

// Reassign returns r (normalized) with every slot of ranges given to the
// shard named to. Every slot of ranges must be frozen (Freeze first): a
// switch of a range still served would let a write land on the old shard
// after its rows were copied. to must be one of r's shards.
func (r Record) Reassign(ranges []slots.Range, to string) (Record, error) {
	c, err := r.compile(nil)
	if err != nil {
		return Record{}, err
	}
	ti := slices.Index(r.names(), to)
	if ti < 0 {
		return Record{}, fmt.Errorf("shard map: to shard: unknown shard %q; the map has %q", to, r.names())
	}
	for _, rg := range ranges {
		if err := checkRange(rg); err != nil {
			return Record{}, err
		}
		for s := rg.Lo; s <= rg.Hi; s++ {
			if !c.frozen[s] {
				return Record{}, fmt.Errorf("shard map: slot %d of %s is not frozen; freeze the range before switching it", s, rg)
			}
			c.owner[s] = ti
		}
	}
	return canonical(c, r.names()), nil
}

func canonical(c *compiled, names []string) Record {
	out := c.record(names)
	if len(out.Frozen) == 0 {
		out.Frozen = nil
	}
	return out
}

// checkRange refuses a range outside 0..16383 or reversed.
func checkRange(rg slots.Range) error {
	if rg.Lo < 0 || rg.Hi > slots.MaxSlot || rg.Lo > rg.Hi {
		return fmt.Errorf("shard map: range %d-%d: slots must lie in 0-%d, low first", rg.Lo, rg.Hi, slots.MaxSlot)
	}
	return nil
}

// Routing compiles r at version for a process whose database.shards are
// names: each shard of r must be one of them.
func (r Record) Routing(version int64, names []string) (*shards.Routing, error) {
	c, err := r.compile(names)
	if err != nil {
		return nil, err
	}
	idx := make([]int, len(r.Shards))
	for i, sh := range r.Shards {
		idx[i] = slices.Index(names, sh.Name)
	}
	var frozen []slots.Range
	for _, spec := range specsWhere(func(s int) bool { return c.frozen[s] }) {
		rg, _ := slots.ParseSpec(spec) // canonical specs parse
		frozen = append(frozen, rg)
	}
	return shards.NewRouting(version, func(s int) int { return idx[c.owner[s]] }, frozen)
}
