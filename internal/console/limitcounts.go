package console

import "sync"

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
	tenants spaceSaving[LimitTally]
}

// NewLimitCounts returns a LimitCounts holding at most k tenants (k < 1
// means 256).
func NewLimitCounts(k int) *LimitCounts {
	if k < 1 {
		k = 256
	}
	return &LimitCounts{tenants: newSpaceSaving[LimitTally](k)}
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
	e := l.tenants.count(tenant)
	counts := &e.val.Refused
	if shadow {
		counts = &e.val.Shadow
	}
	*counts.at(resource)++
}

// Of returns tenant's counts, and whether it is held.
func (l *LimitCounts) Of(tenant string) (LimitTally, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.tenants.tenants[tenant]; e != nil {
		t := e.val
		t.Error = e.err
		return t, true
	}
	return LimitTally{}, false
}

// Top returns up to n held tenants, the most counted first.
func (l *LimitCounts) Top(n int) []string {
	l.mu.Lock()
	top := l.tenants.top(n)
	l.mu.Unlock()
	out := make([]string, len(top))
	for i, e := range top {
		out[i] = e.tenant
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
