package admission

// Concurrency units. An account's MaxConcurrent is split into credit: each
// shard owns some, the rest waits in the account's pool. A shard admits
// while its permits in use stay below its credit, with one
// compare-exchange on its own word, so admissions on different shards
// share no cache line. Credit moves only on the slow path: a shard that has
// run out takes a chunk from the pool, and when the pool is empty takes the
// idle credit of its siblings; a release gives idle credit above the
// account's keep back to the pool.
//
// The limit is exact: every unit of credit is in exactly one place (a
// shard, the pool, or the register of a slow path moving it), and a shard
// never has more permits in use than credit, because admitting and taking
// credit away are compare-exchanges on the same word. What partitioning
// costs is the converse: an admission that meets no idle credit anywhere is
// rejected even if a permit on another shard is being released at that
// instant, so near the limit an account can see a rejection that a single
// shared gauge would have turned into an admission a moment later. With one
// shard all credit stays on it and the behaviour is the shared gauge's.
//
// A shard's word packs credit in its high 32 bits and permits in use in its
// low 32, so Config.MaxConcurrent is capped at MaxConcurrentLimit.

const (
	creditShift = 32
	inUseMask   = 1<<creditShift - 1
	oneCredit   = 1 << creditShift

	// MaxConcurrentLimit is the largest Config.MaxConcurrent: a shard holds
	// its credit and its permits in use in 32 bits each.
	MaxConcurrentLimit = 1<<31 - 1

	// unitRefills bounds how often one admission refills its shard's
	// credit before it gives up; each refill found credit that other
	// admissions on the shard then spent first.
	unitRefills = 8
)

// unitChunk is how much credit a shard takes from the pool at a time and
// keeps idle on release: a quarter of its even share, so shards can lend to
// one another before the pool runs dry, and at least 1. With one shard it
// is the whole limit, which never moves.
func unitChunk(maxConc int64, shards int) uint64 {
	if shards == 1 {
		return uint64(maxConc)
	}
	return uint64(max(1, maxConc/int64(4*shards)))
}

// acquireSlow takes a concurrency unit on sh after the fast path found no
// idle credit there (or lost its one compare-exchange). It returns whether
// a unit was taken and the compare-exchanges it lost.
func (e *Engine) acquireSlow(a *account, sh *shard) (bool, uint64) {
	var lost uint64
	for refills := 0; ; {
		w := sh.units.Load()
		if w&inUseMask < w>>creditShift {
			if sh.units.CompareAndSwap(w, w+1) {
				return true, lost
			}
			lost++
			continue
		}
		if refills == unitRefills {
			return false, lost
		}
		refills++
		got, n := a.takePool(a.keep)
		lost += n
		if got == 0 {
			got, n = a.stealCredit(sh, a.keep)
			lost += n
		}
		if got == 0 {
			return false, lost
		}
		sh.units.Add(got << creditShift)
	}
}

// takePool takes up to want credit from the account's pool.
func (a *account) takePool(want uint64) (uint64, uint64) {
	var lost uint64
	for {
		p := a.pool.Load()
		if p == 0 {
			return 0, lost
		}
		got := min(p, want)
		if a.pool.CompareAndSwap(p, p-got) {
			return got, lost
		}
		lost++
	}
}

// stealCredit takes up to want idle credit from the first sibling of sh
// that has any.
func (a *account) stealCredit(sh *shard, want uint64) (uint64, uint64) {
	var lost uint64
	for j := range a.shards {
		s := &a.shards[j]
		if s == sh {
			continue
		}
		for {
			w := s.units.Load()
			idle := w>>creditShift - w&inUseMask
			if idle == 0 {
				break
			}
			got := min(idle, want)
			if s.units.CompareAndSwap(w, w-got<<creditShift) {
				return got, lost
			}
			lost++
		}
	}
	return 0, lost
}

// releaseUnit gives back a unit taken on sh, returning idle credit above
// the account's keep to the pool. Releasing on a shard with nothing in use
// is a no-op, so a doubly released permit cannot mint credit.
func (a *account) releaseUnit(sh *shard) {
	// A lowered per-account limit (Engine.refresh) left debt: the unit's
	// credit is destroyed with it until the debt is paid.
	var pay uint64
	if a.debt.Load() > 0 && a.takeDebt() {
		pay = 1
	}
	for {
		w := sh.units.Load()
		if w&inUseMask == 0 {
			if pay != 0 {
				a.debt.Add(1)
			}
			return
		}
		next := w - 1 - pay<<creditShift
		var back uint64
		if idle := next>>creditShift - next&inUseMask; idle > a.keep {
			back = idle - a.keep
			next -= back << creditShift
		}
		if sh.units.CompareAndSwap(w, next) {
			if back != 0 {
				a.pool.Add(back)
			}
			return
		}
	}
}

// takeDebt takes one unit of debt, if there is any left.
func (a *account) takeDebt() bool {
	for {
		d := a.debt.Load()
		if d <= 0 {
			return false
		}
		if a.debt.CompareAndSwap(d, d-1) {
			return true
		}
	}
}

// takeIdle destroys up to want of sh's idle credit and returns how much.
func (sh *shard) takeIdle(want uint64) uint64 {
	for {
		w := sh.units.Load()
		idle := w>>creditShift - w&inUseMask
		if idle == 0 {
			return 0
		}
		got := min(idle, want)
		if sh.units.CompareAndSwap(w, w-got<<creditShift) {
			return got
		}
	}
}
