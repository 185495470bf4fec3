package console

import "sort"

// spaceSaving holds at most k tenants ranked by their events with the
// space-saving algorithm: a new tenant when full takes the place of the
// least counted one and inherits its count as its possible overcount. Any
// tenant counted more than n/k times of n is held, with rank - err <= its
// true count <= rank. V is what the user keeps beside each tenant's rank
// (reset when the tenant takes a place). Not safe for concurrent use: its
// users (TopK, LimitCounts) hold their own lock.
type spaceSaving[V any] struct {
	k       int
	tenants map[string]*ranked[V]
}

// ranked is one held tenant.
type ranked[V any] struct {
	rank, err uint64
	val       V
}

func newSpaceSaving[V any](k int) spaceSaving[V] {
	return spaceSaving[V]{k: k, tenants: make(map[string]*ranked[V], k)}
}

// count counts one event of tenant and returns its entry, placing it
// first (O(k) only when a held tenant is evicted).
func (s *spaceSaving[V]) count(tenant string) *ranked[V] {
	e := s.tenants[tenant]
	if e == nil {
		e = &ranked[V]{}
		if len(s.tenants) >= s.k {
			var minKey string
			var minE *ranked[V]
			for k, x := range s.tenants {
				if minE == nil || x.rank < minE.rank || (x.rank == minE.rank && k < minKey) {
					minKey, minE = k, x
				}
			}
			delete(s.tenants, minKey)
			e.rank, e.err = minE.rank, minE.rank
		}
		s.tenants[tenant] = e
	}
	e.rank++
	return e
}

// rankedEntry is one tenant of a top list.
type rankedEntry[V any] struct {
	tenant string
	ranked[V]
}

// top returns up to n held tenants, the most counted first (ties by
// tenant id), with copies of their entries.
func (s *spaceSaving[V]) top(n int) []rankedEntry[V] {
	all := make([]rankedEntry[V], 0, len(s.tenants))
	for k, e := range s.tenants {
		all = append(all, rankedEntry[V]{k, *e})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].rank != all[j].rank {
			return all[i].rank > all[j].rank
		}
		return all[i].tenant < all[j].tenant
	})
	return all[:min(n, len(all))]
}
