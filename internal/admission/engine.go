package admission

import (
	"cmp"
	"errors"
	"hash/maphash"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
)

// bucket holds one shard's share of the rate limit: share units of burst
// refilled at one unit per interval ns. tolerance = share × interval is the
// GCRA's burst tolerance.
type bucket struct {
	share     int64
	interval  int64
	tolerance int64
}

// Engine admits work per account. All methods are safe for concurrent use.
type Engine struct {
	// Read-only after New; every admission reads them.
	shardMask uint64
	tallyMask uint64
	limited   bool
	rateOn    bool
	perAcct   bool // Config.Limits: limits and rate buckets live in each account
	maxConc   int64
	now       *atomic.Int64
	seed      maphash.Seed
	tallies   []tallyBlock
	buckets   []bucket
	leaseSize int64
	allowance int64
	funding   int64
	idleAfter int64
	maxAcct   int64
	clock     *Clock
	lim       Limiter
	cfg       Config
	_         [64]byte

	// gen is the limits generation (Config.Limits): Refresh bumps it and an
	// account whose own generation differs re-reads its limits.
	gen atomic.Uint64
	_   [56]byte

	accounts accountMap
	closed   atomic.Bool
}

// New returns an engine for cfg, or the first validation error.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clock := cmp.Or(cfg.Clock, CoarseClock())
	parts := ShardsFor(max(cfg.Shards, AvailableParallelism()))
	e := &Engine{
		shardMask: uint64(cfg.Shards - 1),
		tallyMask: uint64(parts - 1),
		limited:   cfg.MaxConcurrent > 0 || cfg.Limits != nil,
		rateOn:    cfg.Rate > 0 || cfg.Limits != nil,
		perAcct:   cfg.Limits != nil,
		lim:       cfg.Limits,
		maxConc:   cfg.MaxConcurrent,
		now:       clock.cell(),
		seed:      maphash.MakeSeed(),
		tallies:   make([]tallyBlock, parts),
		leaseSize: cfg.LeaseSize,
		allowance: cfg.OverageAllowance,
		funding:   cfg.Funding,
		idleAfter: int64(cfg.IdleAfter),
		maxAcct:   int64(cfg.MaxAccounts),
		clock:     clock,
		cfg:       cfg,
	}
	if e.rateOn {
		if !e.perAcct {
			e.buckets = splitRate(cfg.Rate, cfg.Burst, cfg.Shards)
		}
		clock.acquire()
	}
	e.accounts.swept.Store(int64(clock.Now()))
	return e, nil
}

// splitRate divides burst across n shard buckets as evenly as integers
// allow (the first burst%n shards get one more) and gives each bucket the
// matching fraction of the rate, so the shares sum exactly to rate and
// burst. With burst < n, the last n-burst buckets get nothing and every
// admission that lands on them is served by a sibling (the slow path).
func splitRate(rate float64, burst int64, n int) []bucket {
	bs := make([]bucket, n)
	for i := range bs {
		share := burst / int64(n)
		if int64(i) < burst%int64(n) {
			share++
		}
		if share == 0 {
			continue // tolerance 0: admits only zero-cost requests
		}
		perShard := rate * float64(share) / float64(burst)
		// Round the interval up: a bucket may run slightly slow, never fast.
		interval := max(int64(math.Ceil(1e9/perShard)), 1)
		bs[i] = bucket{share: share, interval: interval, tolerance: share * interval}
	}
	return bs
}

// Close releases the engine's hold on the coarse clock. Call it when the
// engine is discarded; admitting after Close is not supported (the rate
// buckets' clock may stop). Close is idempotent.
func (e *Engine) Close() {
	if e.closed.CompareAndSwap(false, true) && e.rateOn {
		e.clock.release()
	}
}

// Config returns the configuration the engine was built with.
func (e *Engine) Config() Config { return e.cfg }

// Layout returns the engine's lease and tally layout.
func (e *Engine) Layout() Layout {
	return Layout{Shards: int(e.shardMask + 1), TallyPartitions: int(e.tallyMask + 1)}
}

// Permit is an admitted unit of concurrency. It is a value (two pointers)
// and costs no allocation; the holder must Release it exactly once.
type Permit struct {
	a  *account
	sh *shard // the shard that admitted it, which holds its unit
}

// Held reports whether p still holds its unit.
func (p *Permit) Held() bool { return p.a != nil }

// Release returns the permit's concurrency unit to the shard that admitted
// it. It clears p, so releasing the same Permit variable again is a no-op:
// an explicit early Release followed by a deferred one is safe. Copies of a
// Permit do not share that state; releasing two copies releases twice,
// which is clamped at zero (no count goes negative) but can still let one
// extra request in while others are in flight, so keep one owner per
// permit. Release of a zero Permit is a no-op.
func (p *Permit) Release() {
	a, sh := p.a, p.sh
	if a == nil {
		return
	}
	p.a, p.sh = nil, nil
	a.undoUnit(sh)
}

var errNegativeCost = errors.New("admission: negative cost")

// Admit asks to admit cost units for account from the current P's affinity.
// It returns a held Permit and Admitted, or a zero Permit and the reason.
// Cost 0 takes a concurrency unit and nothing else. A negative cost panics.
//
// Admit takes no lock and allocates nothing when the account exists and
// its shard can serve the request; see the package doc for the slow paths.
func (e *Engine) Admit(account string, cost int64) (Permit, Outcome) {
	return e.admit(currentAffinity(), account, cost)
}

// AdmitAt is Admit from an explicit affinity (ClaimAffinity), for embedders
// that admit from long-lived goroutines of their own.
func (e *Engine) AdmitAt(aff Affinity, account string, cost int64) (Permit, Outcome) {
	return e.admit(aff, account, cost)
}

// admit is the fast path: the locality's last account or one hash and a
// lock-free lookup, then one atomic operation per enabled limit on the
// affinity's shard, and
// the tallies. Creation, sibling buckets, lease refills and overage are the
// slow paths, each in its own function.
func (e *Engine) admit(aff Affinity, key string, cost int64) (Permit, Outcome) {
	if cost < 0 {
		panic(errNegativeCost)
	}
	tb := &e.tallies[uint64(aff)&e.tallyMask]
	i := uint64(aff) & e.shardMask
	cached := tb.last.Load()
	a, h := cached, uint64(0)
	if a != nil && a.key == key {
		h = a.hash
	} else {
		h = maphash.String(e.seed, key)
		a = e.accounts.lookup(h, key)
	}
	var (
		sh   *shard
		lost uint64
	)
	for {
		if a == nil {
			if a = e.obtain(h, key); a == nil {
				tb.tally[RejectedCapacity].Add(1)
				return Permit{}, RejectedCapacity
			}
		}
		sh = &a.shards[i]
		if sh.touched.Load() == 0 {
			sh.touched.Store(1)
		}
		if e.perAcct && a.gen.Load() != e.gen.Load() {
			e.refresh(a)
		}
		if e.limited {
			w := sh.units.Load()
			if w&inUseMask >= w>>creditShift || !sh.units.CompareAndSwap(w, w+1) {
				if w&inUseMask < w>>creditShift {
					lost++ // the fast path's exchange lost a race
				}
				ok, n := e.acquireSlow(a, sh)
				lost += n
				if !ok {
					e.finish(a, sh, tb, RejectedConcurrency, lost)
					return Permit{}, RejectedConcurrency
				}
			}
		} else {
			sh.units.Add(1)
		}
		// Holding a unit, check the account was not evicted meanwhile; the
		// evictor checks the units after marking it dead, so one of the two
		// always sees the other.
		if !a.dead.Load() {
			break
		}
		a.undoUnit(sh)
		a = e.relookup(h, key)
	}
	if a != cached {
		tb.last.Store(a)
	}

	if e.rateOn {
		bs := e.buckets
		if e.perAcct {
			bs = nil
			if rs := a.rate.Load(); rs != nil {
				bs = rs.buckets
			}
		}
		if bs != nil {
			b := &bs[i]
			if cost > b.share || !take(&sh.tat, e.now.Load(), cost, b) {
				if !e.rateSlow(a, bs, i, cost) {
					a.undoUnit(sh)
					e.finish(a, sh, tb, RejectedRate, lost)
					return Permit{}, RejectedRate
				}
			}
		}
	}

	if cost != 0 && a.metered.Load() {
		l := sh.lease.Load()
		if l < cost || !sh.lease.CompareAndSwap(l, l-cost) {
			if l >= cost {
				lost++
			}
			ok, n := e.quotaSlow(a, sh, cost)
			lost += n
			if !ok {
				a.undoUnit(sh)
				e.finish(a, sh, tb, RejectedQuota, lost)
				return Permit{}, RejectedQuota
			}
		}
	}

	e.finish(a, sh, tb, Admitted, lost)
	return Permit{a: a, sh: sh}, Admitted
}

// finish records an outcome, and the lost exchanges if there were any (the
// count lives in a register until then, so an uncontended admission writes
// no contention counter at all).
func (e *Engine) finish(a *account, sh *shard, tb *tallyBlock, o Outcome, lost uint64) {
	sh.tally[o].Add(1)
	tb.tally[o].Add(1)
	if lost != 0 {
		a.contended.Add(lost)
		tb.contended.Add(lost)
	}
}

// undoUnit gives back the concurrency unit taken on sh, clamped at zero.
func (a *account) undoUnit(sh *shard) {
	if a.limited {
		a.releaseUnit(sh)
		return
	}
	for {
		w := sh.units.Load()
		if w == 0 || sh.units.CompareAndSwap(w, w-1) {
			return
		}
	}
}

// take is the GCRA: admit cost units if the bucket's theoretical arrival
// time, pushed by cost intervals, stays within tolerance of now. The caller
// guarantees cost <= b.share, so cost*interval cannot overflow.
func take(tat *atomic.Int64, now, cost int64, b *bucket) bool {
	inc := cost * b.interval
	for {
		t := tat.Load()
		base := max(now, t)
		next := base + inc
		if next-now > b.tolerance {
			return false
		}
		if tat.CompareAndSwap(t, next) {
			return true
		}
	}
}

// rateSlow runs when the affinity's own bucket cannot cover cost: it tries
// the sibling buckets, so an account served from fewer Ps than shards still
// gets its whole rate. Every bucket keeps its own bound, so borrowing never
// admits more than the sum of the shares.
func (e *Engine) rateSlow(a *account, bs []bucket, i uint64, cost int64) bool {
	now := e.now.Load()
	for k := uint64(1); k <= e.shardMask; k++ {
		j := (i + k) & e.shardMask
		b := &bs[j]
		if cost <= b.share && take(&a.shards[j].tat, now, cost, b) {
			return true
		}
	}
	return false
}

// quotaSlowAttempts bounds the refill loop; past it the admission is
// decided on what the lease holds plus overage.
const quotaSlowAttempts = 8

// quotaSlow runs when sh's lease cannot cover cost: take the next chunk from
// the line by compare-exchange, pull sibling leases back to the line when it
// is empty, and only then debit overage. It returns the lost exchanges.
func (e *Engine) quotaSlow(a *account, sh *shard, cost int64) (bool, uint64) {
	var lost uint64
	for attempt := 0; attempt < quotaSlowAttempts; attempt++ {
		l := sh.lease.Load()
		if l >= cost {
			if sh.lease.CompareAndSwap(l, l-cost) {
				return true, lost
			}
			lost++
			continue
		}
		got, n := takeLine(a, max(e.leaseSize, cost-l))
		lost += n
		if got > 0 {
			sh.lease.Add(got)
			continue
		}
		if a.reclaimSiblings(sh) == 0 {
			break
		}
	}
	// The line and the other leases cannot cover cost: spend this lease and
	// cover the rest from the overage allowance.
	for {
		l := sh.lease.Load()
		if l >= cost {
			if sh.lease.CompareAndSwap(l, l-cost) {
				return true, lost
			}
			lost++
			continue
		}
		if l > 0 && !sh.lease.CompareAndSwap(l, 0) {
			lost++
			continue
		}
		need := cost - max(l, 0)
		ok, n := e.debitOverage(a, need)
		lost += n
		if ok {
			sh.overage.Add(need)
			return true, lost
		}
		if l > 0 {
			sh.lease.Add(l)
		}
		return false, lost
	}
}

// takeLine takes up to want units from the line.
func takeLine(a *account, want int64) (int64, uint64) {
	var lost uint64
	for {
		bal := a.line.Load()
		if bal <= 0 {
			return 0, lost
		}
		got := min(bal, want)
		if a.line.CompareAndSwap(bal, bal-got) {
			return got, lost
		}
		lost++
	}
}

// reclaimSiblings moves other shards' unspent leases back to the line and
// returns how many units moved.
func (a *account) reclaimSiblings(except *shard) int64 {
	var moved int64
	for j := range a.shards {
		s := &a.shards[j]
		if s == except || s.lease.Load() <= 0 {
			continue
		}
		if u := s.lease.Swap(0); u > 0 {
			a.line.Add(u)
			moved += u
		}
	}
	return moved
}

// debitOverage admits need units past the empty line if the allowance has
// room.
func (e *Engine) debitOverage(a *account, need int64) (bool, uint64) {
	var lost uint64
	for {
		o := a.overage.Load()
		if need > e.allowance-o {
			return false, lost
		}
		if a.overage.CompareAndSwap(o, o+need) {
			return true, lost
		}
		lost++
	}
}

// relookup is taken when an admitter raced an eviction: let the evictor
// finish, then look again (the account is either gone, and will be
// re-created, or revived).
func (e *Engine) relookup(h uint64, key string) *account {
	runtime.Gosched()
	return e.accounts.lookup(h, key)
}

// newAccount builds a fresh account with the engine's defaults; funded
// says whether it gets Config.Funding (accounts Fund creates do not: the
// control plane sets their line). The key is cloned so the engine never pins
// a caller's larger buffer.
func (e *Engine) newAccount(key string, h uint64, now int64, funded bool) *account {
	a := &account{
		key:     strings.Clone(key),
		hash:    h,
		shards:  make([]shard, e.shardMask+1),
		mask:    e.shardMask,
		limited: e.limited,
	}
	maxConc := e.maxConc
	if e.perAcct {
		// The generation is read before the limits: a Refresh between
		// the two makes the first admission read them again.
		a.gen.Store(e.gen.Load())
		l := e.lim.Limits(key)
		maxConc = creditFor(l)
		a.rate.Store(rateOf(l, len(a.shards)))
	}
	if e.limited {
		a.maxConc = maxConc
		chunk := unitChunk(maxConc, len(a.shards))
		a.keep = chunk
		if len(a.shards) == 1 {
			a.shards[0].units.Store(uint64(maxConc) << creditShift)
		} else {
			a.pool.Store(uint64(maxConc))
		}
	}
	a.lastSeen.Store(now)
	if funded && e.funding > 0 {
		a.line.Store(e.funding)
		a.metered.Store(true)
	}
	return a
}

// obtain returns the account for key, creating it if needed; nil means the
// engine is full and nothing could be evicted. This is the creation slow
// path: it locks one stripe, and at capacity evicts from a bounded sample
// of others first.
func (e *Engine) obtain(h uint64, key string) *account {
	a, _ := e.open(h, key, false)
	return a
}

// open finds or creates key's account under its stripe lock and, if pin,
// pins it. created reports whether it is new.
func (e *Engine) open(h uint64, key string, pin bool) (a *account, created bool) {
	s := e.accounts.stripe(h)
	s.mu.Lock()
	if a = s.lookupLocked(h, key); a != nil {
		if pin {
			a.pinned.Store(true)
		}
		s.mu.Unlock()
		return a, false
	}
	s.mu.Unlock()

	now := int64(e.clock.Now())
	if !e.reserve(now) {
		return nil, false
	}
	s.mu.Lock()
	if a = s.lookupLocked(h, key); a != nil {
		e.accounts.count.Add(-1) // someone else created it meanwhile
	} else {
		a = e.newAccount(key, h, now, !pin)
		s.insertLocked(a)
		created = true
	}
	if pin {
		a.pinned.Store(true)
	}
	s.mu.Unlock()
	if created {
		e.maybeSweep(now)
	}
	return a, created
}

// Refresh makes every account re-read its limits from Config.Limits on its
// next admission (call it after the limits changed). It is one atomic add;
// without Config.Limits it does nothing useful.
func (e *Engine) Refresh() { e.gen.Add(1) }

// creditFor is an account's concurrency credit: its limit, or the largest
// limit when it has none, so that every account of a Limits engine counts
// permits the same way and a change between "none" and a number is a
// change of credit only.
func creditFor(l AccountLimits) int64 {
	if l.MaxConcurrent <= 0 || l.MaxConcurrent > MaxConcurrentLimit {
		return MaxConcurrentLimit
	}
	return l.MaxConcurrent
}

// rateOf is an account's rate buckets, nil for no rate.
func rateOf(l AccountLimits, shards int) *rateSpec {
	if !(l.Rate > 0) || math.IsInf(l.Rate, 0) {
		return nil
	}
	return &rateSpec{buckets: splitRate(l.Rate, max(l.Burst, 1), shards)}
}

// refresh applies a's current limits. One admitter does it while the others
// go on with the old limits; the concurrency limit changes by adding credit
// or by destroying idle credit, and what is in use beyond a lowered limit
// becomes debt that releases pay, so the limit stays exact for new
// admissions.
func (e *Engine) refresh(a *account) {
	if !a.refresh.CompareAndSwap(0, 1) {
		return
	}
	defer a.refresh.Store(0)
	g := e.gen.Load()
	if a.gen.Load() == g {
		return
	}
	l := e.lim.Limits(a.key)
	want := creditFor(l)
	delta := want - a.maxConc
	a.maxConc = want
	switch {
	case delta > 0:
		for d := a.debt.Load(); d > 0 && delta > 0; d = a.debt.Load() {
			pay := min(d, delta)
			if a.debt.CompareAndSwap(d, d-pay) {
				delta -= pay
			}
		}
		if delta > 0 {
			if len(a.shards) == 1 {
				a.shards[0].units.Add(uint64(delta) << creditShift)
			} else {
				a.pool.Add(uint64(delta))
			}
		}
	case delta < 0:
		need := uint64(-delta)
		got, _ := a.takePool(need)
		need -= got
		for j := range a.shards {
			if need == 0 {
				break
			}
			need -= a.shards[j].takeIdle(need)
		}
		if need > 0 {
			a.debt.Add(int64(need))
		}
	}
	a.rate.Store(rateOf(l, len(a.shards)))
	a.gen.Store(g)
}
