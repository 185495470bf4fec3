package console

import "sync"

// TopK counts the most frequent tenants in bounded memory with the
// space-saving algorithm: it holds at most k tenants; a new tenant when
// full takes the place of the least counted one, inheriting its count as
// its possible overcount (Error). Any tenant counted more than n/k times
// of n is held, with Count - Error <= its true count <= Count.
//
// Concurrency: safe for concurrent use; one short critical section per
// Add (a map lookup, and an O(k) scan only when a new tenant evicts one).
// It is fed by refusals, which the bulkheads answer without work, not by
// every request.
type TopK struct {
	mu     sync.Mutex
	counts spaceSaving[struct{}]
	total  uint64
}

// TenantCount is one tenant of a TopK report.
type TenantCount struct {
	// Tenant is the tenant id.
	Tenant string `json:"tenant"`
	// Count is its counted events; Error how much of it may belong to the
	// tenants it displaced (its true count is at least Count - Error).
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// NewTopK returns a TopK holding at most k tenants (k < 1 means 64).
func NewTopK(k int) *TopK {
	if k < 1 {
		k = 64
	}
	return &TopK{counts: newSpaceSaving[struct{}](k)}
}

// Add counts one event of tenant.
func (t *TopK) Add(tenant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	t.counts.count(tenant)
}

// Top returns up to n tenants, most counted first, and the events counted
// in all.
func (t *TopK) Top(n int) ([]TenantCount, uint64) {
	t.mu.Lock()
	top := t.counts.top(n)
	total := t.total
	t.mu.Unlock()
	out := make([]TenantCount, len(top))
	for i, e := range top {
		out[i] = TenantCount{Tenant: e.tenant, Count: e.rank, Error: e.err}
	}
	return out, total
}
