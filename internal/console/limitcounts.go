package console

import (
	"sort"
	"sync"
)

// The resources a plan's limits refuse, as the runtime names them
// (runtime.Options.OnTenantLimit) and the metrics label them.
const (
	ResourceRequest = "request"
	ResourceRate    = "rate"
	ResourceQuota   = "quota"
	ResourceDB      = "db"
)

// ResourceCounts counts one kind of event per resource.
type ResourceCounts struct {
	Request uint64 `json:"request"`
	Rate    uint64 `json:"rate"`
	Quota   uint64 `json:"quota"`
	DB      uint64 `json:"db"`
}

// at returns the counter of resource, nil for a resource it does not know.
func (r *ResourceCounts) at(resource string) *uint64 {
	switch resource {
	case ResourceRequest:
		return &r.Request
	case ResourceRate:
		return &r.Rate
	case ResourceQuota:
		return &r.Quota
	case ResourceDB:
		return &r.DB
	}
	return nil
}

// LimitTally is one tenant's counts in a LimitCounts.
type LimitTally struct {
	// Refused counts the refusals by the tenant's plan limits; Shadow the
	// requests a shadow override would have refused. Both count from the
	// moment the tenant took its place in the LimitCounts.
	Refused ResourceCounts `json:"refused"`
	Shadow  ResourceCounts `json:"shadow"`
	// Error is how many of the tenant's events the LimitCounts may have
	// counted for tenants it displaced (the ranking's overcount, as in
	// TopK); 0 when it has held the tenant since its first event.
	Error uint64 `json:"error"`
}

// LimitCounts counts each tenant's plan refusals and shadow refusals per
// resource in bounded memory: at most k tenants, ranked by their events
// with the space-saving algorithm (TopK's), so a tenant that keeps being
// refused is held. Metrics cannot give this: they carry the plan, never
// the tenant.
//
// Concurrency: safe for concurrent use; one short critical section per
// Add (a map lookup, and an O(k) scan only when a new tenant evicts one).
// It is fed by refusals and shadow refusals, not by every request.
type LimitCounts struct {
	mu      sync.Mutex
	k       int
	tenants map[string]*limitEntry
}

type limitEntry struct {
	// rank is the space-saving count (events, plus the displaced
	// tenant's count inherited as err).
	rank  uint64
	tally LimitTally
}

// NewLimitCounts returns a LimitCounts holding at most k tenants (k < 1
// means 256).
func NewLimitCounts(k int) *LimitCounts {
	if k < 1 {
		k = 256
	}
	return &LimitCounts{k: k, tenants: make(map[string]*limitEntry, k)}
}

// Add counts one event of tenant on resource: a refusal, or with shadow a
// would-be refusal. Its signature is runtime.Options.OnTenantLimit's. An
// unknown resource is not counted.
func (l *LimitCounts) Add(tenant, resource string, shadow bool) {
	var probe ResourceCounts
	if probe.at(resource) == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.tenants[tenant]
	if e == nil {
		e = l.placeLocked(tenant)
	}
	e.rank++
	counts := &e.tally.Refused
	if shadow {
		counts = &e.tally.Shadow
	}
	*counts.at(resource)++
}

// placeLocked makes room for tenant: a free place, or the least counted
// tenant's, whose count the newcomer inherits as its error.
func (l *LimitCounts) placeLocked(tenant string) *limitEntry {
	e := &limitEntry{}
	if len(l.tenants) >= l.k {
		var minKey string
		var minE *limitEntry
		for k, x := range l.tenants {
			if minE == nil || x.rank < minE.rank || (x.rank == minE.rank && k < minKey) {
				minKey, minE = k, x
			}
		}
		delete(l.tenants, minKey)
		e.rank, e.tally.Error = minE.rank, minE.rank
	}
	l.tenants[tenant] = e
	return e
}

// Of returns tenant's counts, and whether it is held.
func (l *LimitCounts) Of(tenant string) (LimitTally, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.tenants[tenant]; e != nil {
		return e.tally, true
	}
	return LimitTally{}, false
}

// Top returns up to n held tenants, the most counted first.
func (l *LimitCounts) Top(n int) []string {
	type ranked struct {
		tenant string
		rank   uint64
	}
	l.mu.Lock()
	all := make([]ranked, 0, len(l.tenants))
	for k, e := range l.tenants {
		all = append(all, ranked{k, e.rank})
	}
	l.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].rank != all[j].rank {
			return all[i].rank > all[j].rank
		}
		return all[i].tenant < all[j].tenant
	})
	out := make([]string, 0, min(n, len(all)))
	for _, r := range all[:min(n, len(all))] {
		out = append(out, r.tenant)
	}
	return out
}

// ResourceCount is one resource's count.
type ResourceCount struct {
	Resource string
	Count    uint64
}

// List returns the resources counted at least once, in a fixed order
// (the page prints them).
func (r ResourceCounts) List() []ResourceCount {
	var out []ResourceCount
	for _, x := range []ResourceCount{{ResourceRequest, r.Request}, {ResourceRate, r.Rate}, {ResourceQuota, r.Quota}, {ResourceDB, r.DB}} {
		if x.Count > 0 {
			out = append(out, x)
		}
	}
	return out
}
