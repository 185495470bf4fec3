package local

import (
	"hash/maphash"
	"sync/atomic"
)

// tenantSlots is the size of Backend.tenantCache, a power of two. The cache
// lets Insert find a job's tenant without mu, so the drain holding mu does
// not hash tenant ids. It is two-way set-associative: a tenant has two
// slots, the newest entry of its set first.
const tenantSlots = 4096

// tenantSet returns the two slots of id's set in tenantCache (an even
// index and the one after it).
func (b *Backend) tenantSet(id string) (newest, older *atomic.Pointer[tenant]) {
	i := maphash.String(b.tenantSeed, id) & (tenantSlots - 2)
	return &b.tenantCache[i], &b.tenantCache[i+1]
}

// cachedTenant returns the cached tenant id, or nil. It does not take the
// lock (it reads only the tenant's id, which never changes): the caller must
// check that the tenant was not evicted before using it under the lock
// (admit does).
func (b *Backend) cachedTenant(id string) *tenant {
	newest, older := b.tenantSet(id)
	if t := newest.Load(); t != nil && t.id == id {
		return t
	}
	if t := older.Load(); t != nil && t.id == id {
		return t
	}
	return nil
}

// cacheTenant makes t the newest entry of its set. Callers hold mu.
func (b *Backend) cacheTenant(t *tenant) {
	newest, older := b.tenantSet(t.id)
	if n := newest.Load(); n != t {
		older.Store(n)
		newest.Store(t)
	}
}

// uncacheTenant removes an evicted tenant from tenantCache. Callers hold mu.
func (b *Backend) uncacheTenant(t *tenant) {
	newest, older := b.tenantSet(t.id)
	newest.CompareAndSwap(t, nil)
	older.CompareAndSwap(t, nil)
}
