package admission

import (
	"sync"
	"sync/atomic"
)

// shard is one copy of an account's hot mutable state. With Shards = N an
// account has N of them and an admission touches only the one its affinity
// selects (plus siblings on the slow paths). 128 bytes: x86 prefetches
// cache lines in adjacent pairs, so 64 is not enough to keep two shards from
// sharing traffic.
type shard struct {
	lease   atomic.Int64  // units leased from the line, unspent
	tat     atomic.Int64  // rate bucket: theoretical arrival time, ns on the engine clock
	units   atomic.Uint64 // concurrency: credit<<32 | in use (see units.go)
	touched atomic.Uint32
	_       uint32
	overage atomic.Int64               // units this shard admitted past an empty line
	tally   [numOutcomes]atomic.Uint64 // outcomes of admissions on this shard
	_       [40]byte
}

// tallyBlock is one locality's partition of the engine-wide tallies, and
// its most recently admitted account: a tenant's requests come in runs, and
// a hit skips hashing and probing. A cached account may since have been
// evicted; the admission's dead check catches that like any other race with
// eviction.
type tallyBlock struct {
	tally     [numOutcomes]atomic.Uint64
	contended atomic.Uint64
	last      atomic.Pointer[account]
	_         [64]byte
}

// account is one tenant's admission state. Two 128-byte blocks keep two
// access patterns apart: a header every admission reads and almost nothing
// writes, and the funding line and concurrency pool that only slow paths
// and the control plane write. Everything an admission writes on its fast
// path lives in its shard.
type account struct {
	key      string
	hash     uint64
	shards   []shard
	mask     uint64
	keep     uint64 // idle concurrency credit a shard keeps on release (units.go)
	limited  bool
	_        [3]byte
	metered  atomic.Bool  // false: unlimited line, no lease debits
	dead     atomic.Bool  // set by eviction; an admitter that sees it retries
	pinned   atomic.Bool  // funded by the control plane: never evicted
	lastSeen atomic.Int64 // engine-clock ns when a sweep last saw the account used
	// Per-account limits (Config.Limits): the limits generation the
	// account last read, its own rate buckets (nil: no rate), and the
	// concurrency credit still to be destroyed after its limit was lowered
	// (paid by releases).
	gen  atomic.Uint64
	rate atomic.Pointer[rateSpec]
	debt atomic.Int64
	_    [16]byte

	line      atomic.Int64  // funding line balance, units not yet leased
	overage   atomic.Int64  // units admitted past an empty line, unpaid
	contended atomic.Uint64 // lost compare-exchanges on this account since creation
	pool      atomic.Uint64 // concurrency credit no shard holds (limited engines)
	maxConc   int64         // per-account limit in credit; written only by the refresher
	refresh   atomic.Uint32 // 1 while one admitter applies new limits
	_         [84]byte
}

// rateSpec is one account's rate buckets under Config.Limits.
type rateSpec struct {
	buckets []bucket
}

// inFlight returns the account's admitted-but-unreleased permits.
func (a *account) inFlight() int64 {
	var n int64
	for i := range a.shards {
		n += int64(a.shards[i].units.Load() & inUseMask)
	}
	return n
}

// takeTouched reports whether any shard admitted since the last call, and
// clears the marks.
func (a *account) takeTouched() bool {
	used := false
	for i := range a.shards {
		sh := &a.shards[i]
		if sh.touched.Load() != 0 {
			sh.touched.Store(0)
			used = true
		}
	}
	return used
}

// recallLeases moves every shard's unspent lease back to the line, so a
// report shows them and no quota is stranded.
func (a *account) recallLeases() {
	for i := range a.shards {
		if u := a.shards[i].lease.Swap(0); u != 0 {
			a.line.Add(u)
		}
	}
}

// tombstone marks a removed slot: readers skip it, inserts may reuse it.
var tombstone = &account{}

// stripeCount is the number of independently locked parts of the account
// map. Creation locks one; reads lock none.
const stripeCount = 256

// table is an open-addressed, linear-probed array of account pointers.
// Readers load slots atomically and stop at the first nil; writers hold the
// stripe lock and either fill a slot or publish a whole new table.
type table struct {
	slots []atomic.Pointer[account]
	mask  uint64
}

type stripe struct {
	mu    sync.Mutex
	tab   atomic.Pointer[table]
	live  int // guarded by mu
	tombs int // guarded by mu
	_     [32]byte
}

// accountMap is the engine's account index: lock-free lookups of existing
// accounts, creation under one of stripeCount locks at a cost bounded by the
// stripe's size (at most MaxAccounts/stripeCount entries on average).
type accountMap struct {
	stripes   [stripeCount]stripe
	count     atomic.Int64 // accounts held (reserved before insert, so it never exceeds the cap)
	_         [120]byte
	cursor    atomic.Uint64 // next stripe for incremental sweeps and pressure eviction
	swept     atomic.Int64  // engine-clock ns of the last incremental sweep
	evictions atomic.Uint64 // accounts removed (sweeps, pressure, Forget)
}

func (m *accountMap) stripe(h uint64) *stripe { return &m.stripes[h&(stripeCount-1)] }

// lookup finds an account without taking a lock.
func (m *accountMap) lookup(h uint64, key string) *account {
	return m.stripe(h).tab.Load().find(h, key)
}

// find probes t (which may be nil: an empty stripe) for key.
func (t *table) find(h uint64, key string) *account {
	if t == nil {
		return nil
	}
	for i := (h >> 8) & t.mask; ; i = (i + 1) & t.mask {
		a := t.slots[i].Load()
		if a == nil {
			return nil
		}
		if a.hash == h && a != tombstone && a.key == key {
			return a
		}
	}
}

// insertLocked adds a (not present) to s. Caller holds s.mu.
func (s *stripe) insertLocked(a *account) {
	t := s.tab.Load()
	if t == nil || (s.live+s.tombs+1)*4 > len(t.slots)*3 {
		t = s.rebuildLocked(s.live + 1)
	}
	for i := (a.hash >> 8) & t.mask; ; i = (i + 1) & t.mask {
		cur := t.slots[i].Load()
		if cur == nil || cur == tombstone {
			if cur == tombstone {
				s.tombs--
			}
			t.slots[i].Store(a)
			s.live++
			return
		}
	}
}

// rebuildLocked publishes a fresh table sized for want live entries at most
// half full, dropping tombstones. Readers still probing the old table finish
// there; an entry they miss sends them to the locked creation path, which
// sees the new table.
func (s *stripe) rebuildLocked(want int) *table {
	n := 8
	for n < want*2 {
		n <<= 1
	}
	t := &table{slots: make([]atomic.Pointer[account], n), mask: uint64(n - 1)}
	if old := s.tab.Load(); old != nil {
		for i := range old.slots {
			a := old.slots[i].Load()
			if a == nil || a == tombstone {
				continue
			}
			for j := (a.hash >> 8) & t.mask; ; j = (j + 1) & t.mask {
				if t.slots[j].Load() == nil {
					t.slots[j].Store(a)
					break
				}
			}
		}
	}
	s.tombs = 0
	s.tab.Store(t)
	return t
}

// lookupLocked is lookup for a caller holding s.mu.
func (s *stripe) lookupLocked(h uint64, key string) *account { return s.tab.Load().find(h, key) }

// removeLocked replaces a's slot with a tombstone. Caller holds s.mu.
func (s *stripe) removeLocked(a *account) {
	t := s.tab.Load()
	for i := (a.hash >> 8) & t.mask; ; i = (i + 1) & t.mask {
		cur := t.slots[i].Load()
		if cur == nil {
			return
		}
		if cur == a {
			t.slots[i].Store(tombstone)
			s.live--
			s.tombs++
			switch {
			case s.live == 0:
				s.tab.Store(nil) // an emptied stripe holds no memory
				s.tombs = 0
			case s.tombs > s.live*2:
				s.rebuildLocked(s.live)
			}
			return
		}
	}
}

// each calls f for every live account of s. Caller holds s.mu.
func (s *stripe) eachLocked(f func(a *account)) {
	t := s.tab.Load()
	if t == nil {
		return
	}
	for i := range t.slots {
		if a := t.slots[i].Load(); a != nil && a != tombstone {
			f(a)
		}
	}
}

// eachLive calls f for every account reachable without locks (a control-plane
// scan: accounts created or removed during it may or may not be seen).
func (m *accountMap) eachLive(f func(a *account)) {
	for i := range m.stripes {
		t := m.stripes[i].tab.Load()
		if t == nil {
			continue
		}
		for j := range t.slots {
			if a := t.slots[j].Load(); a != nil && a != tombstone {
				f(a)
			}
		}
	}
}
