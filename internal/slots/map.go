package slots

import (
	"fmt"
)

// Owner is one entry of a slot map's input: a shard, a cell, or anything
// else that owns slots.
type Owner struct {
	// Name identifies the owner in errors and deploy output. Required, and
	// unique within one Build call.
	Name string
	// Slots are slot specs such as "0-8191" or "42" (see ParseSpec). Leave
	// Slots empty on every owner to split the slots evenly in order (see
	// EvenSplit); leaving it empty on only some owners is an error.
	Slots []string
}

// Map assigns every slot to exactly one owner, identified by its index in
// the []Owner given to Build. It is immutable and safe for concurrent use.
type Map struct {
	// owner is the lookup table: 32 KiB, one bounds check and one load per
	// lookup. uint16 suffices because there are at most Count owners.
	owner  [Count]uint16
	names  []string
	ranges [][]Range
}

// GapError reports the lowest slot that no owner claims, and the run of
// unowned slots that starts there.
type GapError struct {
	// Gap is the run of unowned slots starting at the first one.
	Gap Range
}

func (e *GapError) Error() string {
	return fmt.Sprintf("slots: slot %d has no owner (gap %d-%d)", e.Gap.Lo, e.Gap.Lo, e.Gap.Hi)
}

// OverlapError reports the lowest slot claimed more than once, with the first
// two claims in input order. First and Second are equal when one owner lists
// the slot twice.
type OverlapError struct {
	// Slot is the lowest slot with more than one claim.
	Slot int
	// First and Second name the owners of the first two claims, in order.
	First, Second string
	// FirstSpec and SecondSpec are the specs that made those claims.
	FirstSpec, SecondSpec string
}

func (e *OverlapError) Error() string {
	if e.First == e.Second {
		return fmt.Sprintf("slots: slot %d is listed twice by %q (specs %q and %q)",
			e.Slot, e.First, e.FirstSpec, e.SecondSpec)
	}
	return fmt.Sprintf("slots: slot %d is owned by both %q and %q (specs %q and %q)",
		e.Slot, e.First, e.Second, e.FirstSpec, e.SecondSpec)
}

// EvenSplit divides the slots into n contiguous ranges in order, for n in
// 1..Count. Sizes differ by at most one: the first Count%n ranges get one
// extra slot, so 3 owners get 0-5461, 5462-10922, 10923-16383.
func EvenSplit(n int) ([]Range, error) {
	if n < 1 || n > Count {
		return nil, fmt.Errorf("slots: cannot split %d slots among %d owners; want 1..%d owners", Count, n, Count)
	}
	base, extra := Count/n, Count%n
	out := make([]Range, n)
	lo := 0
	for i := range out {
		size := base
		if i < extra {
			size++
		}
		out[i] = Range{Lo: lo, Hi: lo + size - 1}
		lo += size
	}
	return out, nil
}

// Build checks owners and returns the map. Every slot 0..MaxSlot must have
// exactly one owner; otherwise the error is a *GapError or *OverlapError for
// the lowest slot that is wrong. If no owner lists any slots, the slots are
// split with EvenSplit in input order. Other errors: no owners, more than
// Count owners, an empty or repeated name, a bad spec (*SpecError with
// Owner set), or some owners with slots and some without (naming the first
// owner without).
func Build(owners []Owner) (*Map, error) {
	n := len(owners)
	if n == 0 {
		return nil, fmt.Errorf("slots: no owners; want at least one")
	}
	if n > Count {
		return nil, fmt.Errorf("slots: %d owners, want at most %d (each needs a slot)", n, Count)
	}
	seen := make(map[string]int, n)
	withSlots := 0
	for i, o := range owners {
		if o.Name == "" {
			return nil, fmt.Errorf("slots: owner %d has an empty name", i)
		}
		if j, dup := seen[o.Name]; dup {
			return nil, fmt.Errorf("slots: owner name %q is used twice (owners %d and %d)", o.Name, j, i)
		}
		seen[o.Name] = i
		if len(o.Slots) > 0 {
			withSlots++
		}
	}

	m := &Map{names: make([]string, n), ranges: make([][]Range, n)}
	for i, o := range owners {
		m.names[i] = o.Name
	}

	if withSlots == 0 {
		split, err := EvenSplit(n)
		if err != nil {
			return nil, err
		}
		for i, r := range split {
			for s := r.Lo; s <= r.Hi; s++ {
				m.owner[s] = uint16(i)
			}
			m.ranges[i] = []Range{r}
		}
		return m, nil
	}
	if withSlots < n {
		for _, o := range owners {
			if len(o.Slots) == 0 {
				return nil, fmt.Errorf("slots: owner %q has no slots while others do; "+
					"give every owner slots, or none to split evenly", o.Name)
			}
		}
	}

	if err := m.assign(owners); err != nil {
		return nil, err
	}
	m.collectRanges()
	return m, nil
}

// claim records who claimed a slot first, for overlap messages.
type claim struct {
	owner, spec int32 // owner index and spec index; owner -1 = unclaimed
}

// assign fills m.owner from the specs, or returns the lowest wrong slot.
//
// Claims are applied in input order. A range stops at its first already
// claimed slot: everything after that point is above a known error, so it
// cannot change which error is lowest. Later ranges are clipped to below the
// lowest overlap found so far for the same reason. Together this bounds the
// work to O(Count + number of specs) however the owners overlap.
func (m *Map) assign(owners []Owner) error {
	claims := make([]claim, Count)
	for s := range claims {
		claims[s].owner = -1
	}
	var overlap *OverlapError
	limit := MaxSlot // slots above limit no longer matter
	for i, o := range owners {
		for k, spec := range o.Slots {
			r, err := ParseSpec(spec)
			if err != nil {
				se := err.(*SpecError)
				se.Owner = o.Name
				return se
			}
			hi := min(r.Hi, limit)
			for s := r.Lo; s <= hi; s++ {
				c := claims[s]
				if c.owner < 0 {
					claims[s] = claim{owner: int32(i), spec: int32(k)}
					continue
				}
				first := owners[c.owner]
				overlap = &OverlapError{
					Slot: s, First: first.Name, Second: o.Name,
					FirstSpec: first.Slots[c.spec], SecondSpec: spec,
				}
				// s <= limit, so this overlap is lower than any found
				// before, and no earlier claim on s was skipped (a skip
				// would have pushed limit below s), so these really are the
				// first two claims on s.
				limit = s - 1
				break
			}
		}
	}
	for s := 0; s <= limit; s++ {
		if claims[s].owner >= 0 {
			continue
		}
		e := s
		for e < MaxSlot && claims[e+1].owner < 0 {
			e++
		}
		return &GapError{Gap: Range{Lo: s, Hi: e}}
	}
	if overlap != nil {
		return overlap
	}
	for s, c := range claims {
		m.owner[s] = uint16(c.owner)
	}
	return nil
}

// collectRanges fills m.ranges from m.owner in one pass: runs come out
// sorted and merged because the slots are visited in order.
func (m *Map) collectRanges() {
	for s := 0; s < Count; {
		i := m.owner[s]
		e := s
		for e < MaxSlot && m.owner[e+1] == i {
			e++
		}
		m.ranges[i] = append(m.ranges[i], Range{Lo: s, Hi: e})
		s = e + 1
	}
}

// Owner returns the index (into Build's input) of the owner of slot, or -1
// if slot is outside 0..MaxSlot. It does not allocate.
func (m *Map) Owner(slot int) int {
	if uint(slot) >= Count {
		return -1
	}
	return int(m.owner[slot])
}

// OwnerOf returns the index of the owner of key's slot (see Slot), or -1 and
// ErrEmptyKey. It does not allocate.
func (m *Map) OwnerOf(key string) (int, error) {
	if len(key) == 0 {
		return -1, ErrEmptyKey
	}
	return int(m.owner[slot(key)]), nil
}

// Len is the number of owners.
func (m *Map) Len() int { return len(m.names) }

// Name returns owner i's name. It panics if i is not in 0..Len()-1, like an
// out-of-range slice index.
func (m *Map) Name(i int) string { return m.names[i] }

// Ranges returns owner i's slots as ranges sorted by Lo and merged (adjacent
// runs joined), whatever specs the owner was given. The slice is a fresh
// copy. It panics if i is not in 0..Len()-1.
func (m *Map) Ranges(i int) []Range {
	return append([]Range(nil), m.ranges[i]...)
}

// Specs is Ranges formatted as canonical specs, for deploy output and for
// feeding back into Build.
func (m *Map) Specs(i int) []string {
	out := make([]string, len(m.ranges[i]))
	for k, r := range m.ranges[i] {
		out[k] = r.String()
	}
	return out
}

// SlotCount returns how many slots owner i owns. It panics if i is not in
// 0..Len()-1.
func (m *Map) SlotCount(i int) int {
	n := 0
	for _, r := range m.ranges[i] {
		n += r.Len()
	}
	return n
}
