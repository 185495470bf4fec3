package slots

import "fmt"

// Nest maps each owner of inner onto the owner of outer that holds all of
// its slots — for example each shard onto its cell, since a cell owns whole
// shards. The result is indexed like inner's owners. A range of inner that
// crosses a boundary of outer is a *StraddleError.
func Nest(inner, outer *Map) ([]int, error) {
	out := make([]int, inner.Len())
	for i := range out {
		out[i] = -1
		for _, rg := range inner.Ranges(i) {
			o := outer.Owner(rg.Lo)
			if out[i] < 0 {
				out[i] = o
			}
			if o != out[i] || !within(rg, outer.Ranges(o)) {
				return nil, &StraddleError{Inner: inner.Name(i), Index: i, Range: rg, Outer: outer.Name(o)}
			}
		}
	}
	return out, nil
}

// within reports whether rg lies inside one of rs (merged, as Ranges gives).
func within(rg Range, rs []Range) bool {
	for _, r := range rs {
		if r.Lo <= rg.Lo && rg.Hi <= r.Hi {
			return true
		}
	}
	return false
}

// StraddleError names an inner owner whose slots cross an outer boundary.
type StraddleError struct {
	// Inner is the inner owner's name and Index its position.
	Inner string
	Index int
	// Range is the inner range that crosses the boundary.
	Range Range
	// Outer owns Range.Lo but not all of Range (or not all of Inner).
	Outer string
}

func (e *StraddleError) Error() string {
	return fmt.Sprintf("%q: slots %s straddle %q and another owner (%s owns slot %d but not all of %q's slots)",
		e.Inner, e.Range, e.Outer, e.Outer, e.Range.Lo, e.Inner)
}
