package shards

import (
	"fmt"

	"github.com/cellgate/cellgate/internal/drain"
	"github.com/cellgate/cellgate/internal/slots"
)

// Routing is one version of the cell's shard map, compiled for the request
// path: each slot's shard (its index in database.shards) and the slots
// frozen while a range moves between two shards. It is immutable; a Set
// swaps whole routings atomically (Install), so a lookup is one atomic load
// and two array reads, with no lock. Only its in-flight count changes.
type Routing struct {
	version int64
	owner   [slots.Count]uint16
	frozen  [slots.Count / 64]uint64
	nfrozen int
	// inflight counts the tenant requests that started on this routing
	// and have not finished (Enter, Leave): once it is replaced, a move
	// learns when no request routed by it can still write to the old
	// shard (Set.OlderInFlight).
	inflight drain.Counter
}

// Enter counts a request that started on r; call Leave when it ends.
func (r *Routing) Enter() { r.inflight.Enter() }

// Leave ends a request Enter counted.
func (r *Routing) Leave() { r.inflight.Leave() }

// NewRouting compiles a routing at version: owner(slot) is the database.shards
// index of the shard that holds slot, for every slot 0..MaxSlot; frozen are
// the slots being moved. An owner outside 0..65535 or a frozen range outside
// 0..MaxSlot is an error naming it; Install checks the indexes against the set.
func NewRouting(version int64, owner func(slot int) int, frozen []slots.Range) (*Routing, error) {
	r := &Routing{version: version}
	for s := 0; s < slots.Count; s++ {
		i := owner(s)
		if i < 0 || i > 0xFFFF {
			return nil, fmt.Errorf("shards: routing: slot %d has no shard (index %d)", s, i)
		}
		r.owner[s] = uint16(i)
	}
	for _, rg := range frozen {
		if rg.Lo < 0 || rg.Hi > slots.MaxSlot || rg.Lo > rg.Hi {
			return nil, fmt.Errorf("shards: routing: frozen range %d-%d is outside 0-%d", rg.Lo, rg.Hi, slots.MaxSlot)
		}
		for s := rg.Lo; s <= rg.Hi; s++ {
			if r.frozen[s>>6]&(1<<(uint(s)&63)) == 0 {
				r.frozen[s>>6] |= 1 << (uint(s) & 63)
				r.nfrozen++
			}
		}
	}
	return r, nil
}

// routingOf compiles the boot map (database.shards) at version 0.
func routingOf(m *slots.Map) *Routing {
	r, _ := NewRouting(0, m.Owner, nil) // a built map owns every slot
	return r
}

// Version is the version the routing was compiled at (0: the boot map
// from config).
func (r *Routing) Version() int64 { return r.version }

// Shard returns the database.shards index of slot's shard; slot must be in
// 0..MaxSlot.
func (r *Routing) Shard(slot int) int { return int(r.owner[slot]) }

// Frozen reports whether slot is frozen for a move; false outside
// 0..MaxSlot.
func (r *Routing) Frozen(slot int) bool {
	if uint(slot) >= slots.Count || r.nfrozen == 0 {
		return false
	}
	return r.frozen[slot>>6]&(1<<(uint(slot)&63)) != 0
}

// FrozenTenant reports whether tenant's slot is frozen (false for an empty
// or invalid tenant id). It allocates nothing.
func (r *Routing) FrozenTenant(tenant string) bool {
	if r.nfrozen == 0 {
		return false
	}
	slot, err := slots.Slot(tenant)
	return err == nil && r.Frozen(slot)
}

// AnyFrozen reports whether any slot is frozen: the request path's fast
// test while no move is under way.
func (r *Routing) AnyFrozen() bool { return r.nfrozen > 0 }

// FrozenRanges returns the frozen slots as merged ranges, in order.
func (r *Routing) FrozenRanges() []slots.Range {
	var out []slots.Range
	for s := 0; s < slots.Count; s++ {
		if !r.Frozen(s) {
			continue
		}
		e := s
		for e < slots.MaxSlot && r.Frozen(e+1) {
			e++
		}
		out = append(out, slots.Range{Lo: s, Hi: e})
		s = e
	}
	return out
}
