package admission

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Affinity is a locality number. An account's shard for an admission is
// affinity mod Shards, and the engine's tally partition is affinity mod
// TallyPartitions. Affinity is a cache-locality hint, never authorization
// evidence: any value is correct, only performance depends on it.
type Affinity uint64

// Observer is the fixed affinity of control-plane work. It is never issued by
// the counter, so using it claims nothing and displaces nobody. The engine's
// own control-plane calls (Fund, Line, Report, Sweep) never look up the
// current P at all; Observer is for embedders that must admit from a
// control-plane goroutine without spending an affinity.
const Observer Affinity = math.MaxUint64

// affinityCounter is the process-global source of affinities: P indexes on
// their first use of a request path, and ClaimAffinity. It hands out
// 0, 1, 2, … and never takes a number back.
var affinityCounter atomic.Uint64

// ClaimAffinity issues a new affinity from the process-global counter, for an
// embedder that admits from goroutines of its own (job workers, for example)
// and wants each to keep one shard. Claim once per long-lived goroutine and
// pass it to AdmitAt; numbers are never recycled, so claiming per request
// crowds every layout (see docs/admission.md).
func ClaimAffinity() Affinity {
	return Affinity(affinityCounter.Add(1) - 1)
}

// AffinitiesAssigned returns how many affinities this process has issued:
// the P indexes that have reached a request path plus every ClaimAffinity.
func AffinitiesAssigned() int {
	return int(affinityCounter.Load())
}

// AvailableParallelism returns the number of goroutines that can run at
// once, GOMAXPROCS. It is the shard count at which no two running goroutines
// share a shard (rounded up to a power of two by ShardsFor).
func AvailableParallelism() int {
	return runtime.GOMAXPROCS(0)
}

// pAffinity maps a P index to the affinity it was issued on first use, plus
// one (0 = not yet issued). It only grows, under pMu; readers load the
// current slice without a lock. Entries never change once set, so after a
// P's first admission its entry sits read-only in every core's cache.
var (
	pAffinity atomic.Pointer[[]atomic.Uint64]
	pMu       sync.Mutex
)

func init() {
	t := make([]atomic.Uint64, ShardsFor(runtime.GOMAXPROCS(0)))
	pAffinity.Store(&t)
}

// currentAffinity returns the affinity of the P the calling goroutine runs
// on. The goroutine may move to another P right after; the answer is still a
// good hint, and nothing depends on it for correctness.
func currentAffinity() Affinity {
	p := procIndex()
	t := *pAffinity.Load()
	if uint(p) < uint(len(t)) {
		if v := t[p].Load(); v != 0 {
			return Affinity(v - 1)
		}
	}
	return issueP(p)
}

// issueP gives P p its affinity on first use (GOMAXPROCS may have grown
// since init, so the table may need to grow too).
func issueP(p int) Affinity {
	pMu.Lock()
	defer pMu.Unlock()
	t := *pAffinity.Load()
	if p >= len(t) {
		n := make([]atomic.Uint64, ShardsFor(p+1)*2)
		for i := range t {
			n[i].Store(t[i].Load())
		}
		pAffinity.Store(&n)
		t = n
	}
	if v := t[p].Load(); v != 0 {
		return Affinity(v - 1)
	}
	a := affinityCounter.Add(1) - 1
	t[p].Store(a + 1)
	return Affinity(a)
}
