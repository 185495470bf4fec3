package local

import "github.com/cellgate/cellgate/internal/jobs"

// tenant is a tenant (or the shared member) across queues: its slot count
// (running against maxRunning), its weight, its lanes (its shuffle shard) and
// its line in each queue it has used. A tenant with no jobs left is kept on
// the idle list for a while rather than forgotten (see maxIdleTenants).
//
// With 1,000 tenants taking turns, a tenant's records are cold when its turn
// comes, so they are laid out for few cache misses: what claims and drains
// use is in the first cache line of a 128-byte (so 128-byte aligned) object.
type tenant struct {
	running int32 // jobs running, at most maxRunning
	jobs    int32 // jobs of the tenant in any state; at 0 it goes idle
	shared  bool  // the shared member: no slot limit, never idle
	// idle: on the backend's idle list (no jobs), evicted beyond
	// maxIdleTenants; evicted: no longer in Backend.tenants, so a hint
	// pointing to it is stale.
	idle, evicted bool
	// id is in the first line with the counters: Insert reads it to check
	// a cache hit, mostly from a job of the same tenant that the same
	// worker just claimed, so the line is already in that core's cache.
	id          string
	linesInline [2]*tenantLine // lines in the queues of index 0 and 1
	// maxRunning (0 = no cap) and weight are the tenant's limits, read
	// again from Backend.limits on each claim and release of its jobs.
	maxRunning, weight int32
	outOfSlots         bool // its lines left the rings at its cap (see nextJob)
	_                  [7]byte

	linesMore          []*tenantLine // lines in the queues of index 2 and up
	lanes              []int         // the lanes whose rings it joins, ascending
	idlePrev, idleNext *tenant       // links in the backend's idle list
}

// newTenant returns a tenant with no jobs and no lines yet.
func newTenant(id string, lanes []int) *tenant { return &tenant{id: id, lanes: lanes, weight: 1} }

// tenant returns the state of tenant id, creating it with its lanes (its
// shuffle shard, or lane 0 without lanes), taking it off the idle list if it
// was there, and making it the newest entry of the tenant cache.
func (b *Backend) tenant(id string) *tenant {
	t := b.tenants[id]
	if t != nil {
		if t.idle {
			b.removeIdleTenant(t)
		}
	} else {
		lanes := b.sharedTenant.lanes // one lane: lane 0
		if b.lanesPerTenant > 0 {
			lanes = jobs.ShuffleShard(id, b.numLanes, b.lanesPerTenant)
		}
		t = newTenant(id, lanes)
		t.maxRunning, t.weight = int32(b.maxConcurrent), 1
		b.refreshLimits(t)
		b.tenants[id] = t
	}
	b.cacheTenant(t)
	return t
}

// hasSlot reports whether the tenant may start another job: only a tenant
// with slots free is linked into the rings.
func (b *Backend) hasSlot(t *tenant) bool {
	return t.shared || t.maxRunning == 0 || t.running < t.maxRunning
}

// refreshLimits reads t's limits from the backend's source, if it has one
// (WithLimits): a change applies from the next claim or release of one of
// t's jobs.
func (b *Backend) refreshLimits(t *tenant) {
	if b.limits == nil || t.shared {
		return
	}
	mr, w := jobs.NormalizeLimits(b.limits.JobLimits(t.id))
	t.maxRunning, t.weight = int32(min(mr, 1<<30)), int32(w)
}

// maxIdleTenants bounds the tenants kept without jobs. Keeping a few saves
// rebuilding a tenant (its lanes, lines and ring nodes) each time a tenant
// with short bursts comes back; the bound keeps memory proportional to the
// tenants with jobs.
const maxIdleTenants = 4096

// addIdleTenant puts a tenant without jobs at the back of the idle list,
// evicting the longest-idle one beyond maxIdleTenants: it leaves the
// tenants map and the cache, and is marked so that a stale hint to it is
// not used (see admit).
func (b *Backend) addIdleTenant(t *tenant) {
	t.idle = true
	t.idlePrev, t.idleNext = b.idleTenantsTail, nil
	if b.idleTenantsTail != nil {
		b.idleTenantsTail.idleNext = t
	} else {
		b.idleTenantsHead = t
	}
	b.idleTenantsTail = t
	b.idleTenants++
	if b.idleTenants > maxIdleTenants {
		old := b.idleTenantsHead
		b.removeIdleTenant(old)
		old.evicted = true
		delete(b.tenants, old.id)
		b.uncacheTenant(old)
	}
}

// removeIdleTenant takes t off the idle list, because it has a job again or
// is being evicted.
func (b *Backend) removeIdleTenant(t *tenant) {
	if t.idlePrev != nil {
		t.idlePrev.idleNext = t.idleNext
	} else {
		b.idleTenantsHead = t.idleNext
	}
	if t.idleNext != nil {
		t.idleNext.idlePrev = t.idlePrev
	} else {
		b.idleTenantsTail = t.idlePrev
	}
	t.idlePrev, t.idleNext = nil, nil
	t.idle = false
	b.idleTenants--
}
