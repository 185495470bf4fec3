package admission

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
)

// Layout describes how an engine partitions its state.
type Layout struct {
	// Shards is the number of copies of each account's lease, rate bucket
	// and tallies: 1 for SINGLE.
	Shards int
	// TallyPartitions is the number of locality partitions of the
	// engine-wide outcome tallies: a power of two at least
	// max(Shards, GOMAXPROCS at New), under every layout.
	TallyPartitions int
}

// String returns "SINGLE" or "SHARDED(n)".
func (l Layout) String() string {
	if l.Shards <= 1 {
		return "SINGLE"
	}
	return fmt.Sprintf("SHARDED(%d)", l.Shards)
}

// Tallies counts admission outcomes.
type Tallies struct {
	Admitted            uint64
	RejectedConcurrency uint64
	RejectedRate        uint64
	RejectedQuota       uint64
	RejectedCapacity    uint64
}

// Of returns the count for outcome o.
func (t Tallies) Of(o Outcome) uint64 {
	switch o {
	case Admitted:
		return t.Admitted
	case RejectedConcurrency:
		return t.RejectedConcurrency
	case RejectedRate:
		return t.RejectedRate
	case RejectedQuota:
		return t.RejectedQuota
	case RejectedCapacity:
		return t.RejectedCapacity
	}
	return 0
}

// Total returns the number of admission calls counted.
func (t Tallies) Total() uint64 {
	return t.Admitted + t.RejectedConcurrency + t.RejectedRate + t.RejectedQuota + t.RejectedCapacity
}

func (t *Tallies) add(c *[numOutcomes]uint64) {
	t.Admitted += c[Admitted]
	t.RejectedConcurrency += c[RejectedConcurrency]
	t.RejectedRate += c[RejectedRate]
	t.RejectedQuota += c[RejectedQuota]
	t.RejectedCapacity += c[RejectedCapacity]
}

// AccountContention is one account's count of lost compare-exchanges.
type AccountContention struct {
	Account            string
	ContendedExchanges uint64
}

// HottestAccounts is how many accounts Contention.Hottest lists at most.
const HottestAccounts = 8

// Contention says where admissions overlap across cores.
type Contention struct {
	// ContendedExchanges is the number of lease debits, overage debits and
	// concurrency acquisitions (on a shard's credit word) that lost a
	// compare-exchange to another core since the engine started. It is a lower bound on contention (rate
	// buckets and releases pay for a contended line without failing), and a
	// nonzero value is never noise.
	ContendedExchanges uint64
	// Hottest lists up to HottestAccounts live accounts with a nonzero
	// count, most first.
	Hottest []AccountContention
}

// Occupancy relates the affinities this process has issued to the engine's
// shards.
type Occupancy struct {
	// Shards is the engine's shard count.
	Shards int
	// AffinitiesAssigned is the number of affinities the process has issued
	// (P indexes that reached a request path, plus ClaimAffinity calls).
	// Affinities are never recycled, so this never decreases.
	AffinitiesAssigned int
}

// CrowdedShards returns how many shards carry more than one affinity.
// Affinities are issued 0, 1, 2, … and land on shard a mod Shards, so with A
// issued over S shards that is min(S, A-S) once A > S. A SINGLE engine
// reports 0: sharing its one shard is the layout, not a deployment fault.
func (o Occupancy) CrowdedShards() int {
	if o.Shards <= 1 || o.AffinitiesAssigned <= o.Shards {
		return 0
	}
	return min(o.Shards, o.AffinitiesAssigned-o.Shards)
}

// IsCrowded reports whether the process has issued more affinities than a
// sharded engine has shards, so some admitting goroutines share shard state.
// A crowded engine is still correct; it has lost the locality it was
// sharded for. Always false for SINGLE.
func (o Occupancy) IsCrowded() bool { return o.CrowdedShards() > 0 }

// Report is the engine's control-plane view. Building it takes no lock the
// request path takes; the figures are a racy-but-consistent-enough snapshot
// of atomics.
type Report struct {
	Layout Layout
	// Accounts is the number of accounts held.
	Accounts int
	// Evictions is the number of accounts removed since start (idle sweeps,
	// pressure at MaxAccounts, Forget).
	Evictions uint64
	// InFlight is the number of permits admitted and not yet released.
	InFlight int64
	// Tallies counts every admission call since the engine started.
	Tallies    Tallies
	Contention Contention
	Sharding   Occupancy
}

// Report builds the engine report. It scans every account (to rank the
// hottest), so it is O(accounts); Tallies is the O(1)-ish read for metrics.
func (e *Engine) Report() Report {
	r := Report{
		Layout:    e.Layout(),
		Accounts:  e.Accounts(),
		Evictions: e.Evictions(),
		Sharding:  e.Occupancy(),
	}
	r.Tallies, r.Contention.ContendedExchanges = e.totals()
	var hot []AccountContention
	e.accounts.eachLive(func(a *account) {
		r.InFlight += a.inFlight()
		if c := a.contended.Load(); c > 0 {
			hot = append(hot, AccountContention{Account: a.key, ContendedExchanges: c})
		}
	})
	sort.Slice(hot, func(i, j int) bool {
		if hot[i].ContendedExchanges != hot[j].ContendedExchanges {
			return hot[i].ContendedExchanges > hot[j].ContendedExchanges
		}
		return hot[i].Account < hot[j].Account
	})
	if len(hot) > HottestAccounts {
		hot = hot[:HottestAccounts]
	}
	r.Contention.Hottest = hot
	return r
}

// Tallies returns the engine-wide outcome counts, summing the locality
// partitions.
func (e *Engine) Tallies() Tallies {
	t, _ := e.totals()
	return t
}

// ContendedExchanges returns the engine-wide count of lost
// compare-exchanges since start (Report().Contention.ContendedExchanges
// without the account scan).
func (e *Engine) ContendedExchanges() uint64 {
	_, c := e.totals()
	return c
}

func (e *Engine) totals() (Tallies, uint64) {
	var (
		sum       [numOutcomes]uint64
		contended uint64
	)
	for i := range e.tallies {
		tb := &e.tallies[i]
		for o := range sum {
			sum[o] += tb.tally[o].Load()
		}
		contended += tb.contended.Load()
	}
	var t Tallies
	t.add(&sum)
	return t, contended
}

// Occupancy returns the sharding occupancy. It claims nothing.
func (e *Engine) Occupancy() Occupancy {
	return Occupancy{Shards: int(e.shardMask + 1), AffinitiesAssigned: AffinitiesAssigned()}
}

// Accounts returns the number of accounts held.
func (e *Engine) Accounts() int { return int(e.accounts.count.Load()) }

// InFlight returns the number of permits admitted and not yet released,
// over all accounts. Leak tests assert it returns to zero.
func (e *Engine) InFlight() int64 {
	var n int64
	e.accounts.eachLive(func(a *account) { n += a.inFlight() })
	return n
}

// InFlightOf returns one account's permits admitted and not yet released (0
// for an account the engine does not hold). It does not create the account.
func (e *Engine) InFlightOf(account string) int64 {
	if a := e.accounts.lookup(maphash.String(e.seed, account), account); a != nil {
		return a.inFlight()
	}
	return 0
}

// Evictions returns the number of accounts removed since start.
func (e *Engine) Evictions() uint64 { return e.accounts.evictions.Load() }

// ShardReport is one shard's part of an account.
type ShardReport struct {
	// Lease is the units leased from the line and not yet spent.
	Lease int64
	// Overage is the units this shard admitted past an empty line.
	Overage int64
	// Tallies counts the admissions this shard decided.
	Tallies Tallies
}

// LineReport is the control-plane view of one account.
type LineReport struct {
	Account string
	// Metered is false for an unlimited line (no quota): Balance, Leased and
	// Overage are then zero.
	Metered bool
	// Balance is the units on the funding line, not yet leased to a shard.
	Balance int64
	// Leased is the units shards hold in leases, unspent. Balance + Leased
	// is what the account can still spend before overage.
	Leased int64
	// Overage is the units admitted past an empty line and not yet repaid.
	Overage int64
	// OverageAllowance is the engine's allowance (Config.OverageAllowance).
	OverageAllowance int64
	// Pinned is true while the control plane keeps the account (Fund pins,
	// Forget unpins); pinned accounts are never evicted.
	Pinned bool
	// InFlight is the account's permits admitted and not yet released.
	InFlight int64
	// ContendedExchanges is this account's lost compare-exchanges.
	ContendedExchanges uint64
	// Tallies sums the account's shards.
	Tallies Tallies
	// Shards has one entry per shard.
	Shards []ShardReport
}

// Line reads an account's line without creating it. ok is false for an
// account the engine does not hold.
func (e *Engine) Line(account string) (r LineReport, ok bool) {
	a := e.accounts.lookup(maphash.String(e.seed, account), account)
	if a == nil {
		return LineReport{}, false
	}
	return e.lineOf(a), true
}

func (e *Engine) lineOf(a *account) LineReport {
	r := LineReport{
		Account:            a.key,
		Metered:            a.metered.Load(),
		Balance:            a.line.Load(),
		Overage:            a.overage.Load(),
		OverageAllowance:   e.allowance,
		Pinned:             a.pinned.Load(),
		InFlight:           a.inFlight(),
		ContendedExchanges: a.contended.Load(),
		Shards:             make([]ShardReport, len(a.shards)),
	}
	for i := range a.shards {
		sh := &a.shards[i]
		var c [numOutcomes]uint64
		for o := range c {
			c[o] = sh.tally[o].Load()
		}
		sr := ShardReport{Lease: sh.lease.Load(), Overage: sh.overage.Load()}
		sr.Tallies.add(&c)
		r.Shards[i] = sr
		r.Leased += sr.Lease
		r.Tallies.add(&c)
	}
	return r
}

// ErrCapacity is returned by Fund when the account is new, the engine holds
// MaxAccounts accounts and none can be evicted.
var ErrCapacity = errors.New("admission: account table full (MaxAccounts) and nothing evictable")

// Fund adds units to an account's funding line, creating the account if
// needed, and pins it (a funded account is never evicted; Forget releases
// it). An unlimited account becomes metered with a line of units. Units
// repay any overage first, and the shards' unspent leases are recalled to
// the line, so the returned report shows the whole balance. Fund with 0
// units meters an account with an empty line. An account Fund creates
// starts from an empty line: Config.Funding is only for accounts the engine
// creates on first admission.
func (e *Engine) Fund(account string, units int64) (LineReport, error) {
	if units < 0 {
		return LineReport{}, fmt.Errorf("admission: Fund: units must be >= 0, got %d", units)
	}
	h := maphash.String(e.seed, account)
	for {
		a, _ := e.open(h, account, true)
		if a == nil {
			return LineReport{}, ErrCapacity
		}
		s := e.accounts.stripe(h)
		s.mu.Lock()
		if s.lookupLocked(h, account) != a {
			s.mu.Unlock() // evicted between open and here (Forget): start over
			continue
		}
		a.pinned.Store(true)
		a.recallLeases()
		pay := units
		for {
			o := a.overage.Load()
			repay := min(o, pay)
			if a.overage.CompareAndSwap(o, o-repay) {
				pay -= repay
				break
			}
		}
		a.line.Add(pay)
		a.metered.Store(true)
		s.mu.Unlock()
		return e.lineOf(a), nil
	}
}

// Forget unpins an account. If nothing is in flight it is removed at once
// (and comes back with the engine's defaults on next use); otherwise it
// stays until an idle sweep removes it. It reports whether the account was
// removed.
func (e *Engine) Forget(account string) bool {
	h := maphash.String(e.seed, account)
	s := e.accounts.stripe(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.lookupLocked(h, account)
	if a == nil {
		return false
	}
	a.pinned.Store(false)
	return e.evictLocked(s, a)
}
