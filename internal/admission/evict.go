package admission

// Eviction policy.
//
// An account is evictable when it is not pinned (never funded through Fund,
// or released by Forget) and has no permit in flight. Two things evict:
//
//   - Idle sweeps. An account unused (no admission on any shard) for at least
//     IdleAfter is removed. Creation runs a bounded incremental sweep (a few
//     stripes) at most every IdleAfter/4; Sweep runs a full one.
//   - Pressure. Creating an account when MaxAccounts are held first evicts
//     one: a second-chance (CLOCK) scan over whole stripes from a rotating
//     cursor, until pressureSample accounts or pressureStripes non-empty
//     stripes have been examined (whole stripes, so the cost is bounded by
//     the stripe size, about MaxAccounts/256 accounts), takes the first account unused since the scan last passed it, or else
//     the least recently seen among those it examined. If every examined
//     account is pinned or busy the admission is RejectedCapacity.
//
// Memory is therefore bounded by MaxAccounts plus pinned accounts the
// control plane funded: a client cycling through tenant ids only churns the
// unpinned part. Eviction marks the account dead and then re-reads its
// in-flight count; an admitter takes its unit and then reads the mark, so
// an account with a permit in flight is never removed and an admitter that
// raced the removal retries on the new account. Unspent leases go back to
// the line before the account is dropped.

const (
	sweepStripesPerCreation = 4
	pressureSample          = 32
	pressureStripes         = 16
)

// maybeSweep runs an incremental idle sweep if one is due.
func (e *Engine) maybeSweep(now int64) {
	last := e.accounts.swept.Load()
	if now-last < e.idleAfter/4 || !e.accounts.swept.CompareAndSwap(last, now) {
		return
	}
	for k := 0; k < sweepStripesPerCreation; k++ {
		e.sweepStripe(e.nextStripe(), now)
	}
}

func (e *Engine) nextStripe() *stripe {
	return &e.accounts.stripes[(e.accounts.cursor.Add(1)-1)&(stripeCount-1)]
}

// Sweep evicts every idle account now and returns how many it removed. It is
// a control-plane call: it locks stripes one at a time, never the request
// path's reads. Creation sweeps incrementally, so calling Sweep is optional;
// a server may call it on a timer to return memory sooner.
func (e *Engine) Sweep() int {
	now := int64(e.clock.Now())
	n := 0
	for i := range e.accounts.stripes {
		n += e.sweepStripe(&e.accounts.stripes[i], now)
	}
	return n
}

func (e *Engine) sweepStripe(s *stripe, now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	s.eachLocked(func(a *account) {
		if a.takeTouched() {
			a.lastSeen.Store(now)
			return
		}
		if a.pinned.Load() || now-a.lastSeen.Load() < e.idleAfter {
			return
		}
		if e.evictLocked(s, a) {
			n++
		}
	})
	return n
}

// relieve evicts one account to make room at MaxAccounts.
func (e *Engine) relieve(now int64) bool {
	var (
		oldest     *account
		oldestAt   int64
		oldestFrom *stripe
		examined   int
	)
	// Empty stripes cost one load, so they do not count against the bound;
	// at least one account is examined if the engine holds any.
	for k, visited := 0, 0; k < stripeCount && visited < pressureStripes && examined < pressureSample; k++ {
		s := e.nextStripe()
		if s.tab.Load() == nil {
			continue
		}
		visited++
		evicted := false
		s.mu.Lock()
		s.eachLocked(func(a *account) {
			if evicted {
				return
			}
			examined++
			if a.pinned.Load() {
				return
			}
			if a.takeTouched() {
				a.lastSeen.Store(now) // second chance
			} else if e.evictLocked(s, a) {
				evicted = true
				return
			}
			if at := a.lastSeen.Load(); a.inFlight() == 0 && (oldest == nil || at < oldestAt) {
				oldest, oldestAt, oldestFrom = a, at, s
			}
		})
		s.mu.Unlock()
		if evicted {
			return true
		}
	}
	if oldest == nil {
		return false
	}
	oldestFrom.mu.Lock()
	defer oldestFrom.mu.Unlock()
	if oldestFrom.lookupLocked(oldest.hash, oldest.key) != oldest || oldest.pinned.Load() {
		return false
	}
	return e.evictLocked(oldestFrom, oldest)
}

// reserve takes one of MaxAccounts places, evicting if needed.
func (e *Engine) reserve(now int64) bool {
	for tries := 0; tries < 2; tries++ {
		if e.accounts.count.Add(1) <= e.maxAcct {
			return true
		}
		e.accounts.count.Add(-1)
		if !e.relieve(now) {
			return false
		}
	}
	return false
}

// evictLocked removes a if nothing is in flight. Caller holds s.mu.
func (e *Engine) evictLocked(s *stripe, a *account) bool {
	a.dead.Store(true)
	if a.inFlight() != 0 {
		a.dead.Store(false)
		return false
	}
	s.removeLocked(a)
	a.recallLeases()
	e.accounts.count.Add(-1)
	e.accounts.evictions.Add(1)
	return true
}
