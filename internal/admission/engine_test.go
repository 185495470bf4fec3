package admission

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConcurrencyLimitIsExact(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.MaxConcurrent = 3 })
	var ps []Permit
	for range 3 {
		ps = append(ps, mustAdmit(t, e, "a", 1))
	}
	if p, o := e.Admit("a", 1); o != RejectedConcurrency || p.Held() {
		t.Fatalf("4th admission = %v (held %v), want rejected_concurrency", o, p.Held())
	}
	// Another account has its own gauge.
	q := mustAdmit(t, e, "b", 1)
	if got := mustLine(t, e, "a").InFlight; got != 3 || e.InFlightOf("a") != 3 {
		t.Fatalf("InFlight(a) = %d / %d, want 3", got, e.InFlightOf("a"))
	}
	if e.InFlightOf("nobody") != 0 {
		t.Fatal("InFlightOf an unknown account")
	}
	ps[0].Release()
	r := mustAdmit(t, e, "a", 1)
	for i := range ps {
		ps[i].Release()
	}
	r.Release()
	q.Release()
	if n := e.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d after releasing everything", n)
	}
}

func TestDoubleReleaseIsSafe(t *testing.T) {
	for _, limit := range []int64{0, 2} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			e, _ := newEngine(t, func(c *Config) { c.MaxConcurrent = limit; c.Shards = 4 })
			other := mustAdmit(t, e, "a", 1)
			p := mustAdmit(t, e, "a", 1)
			p.Release()
			p.Release() // the early-release-then-defer pattern
			if p.Held() {
				t.Fatal("permit still held after Release")
			}
			if got := mustLine(t, e, "a").InFlight; got != 1 {
				t.Fatalf("InFlight = %d after double release, want 1 (the other permit)", got)
			}
			other.Release()
			var zero Permit
			zero.Release()
			if got := e.InFlight(); got != 0 {
				t.Fatalf("InFlight = %d, want 0", got)
			}
		})
	}
}

func TestNegativeCostPanics(t *testing.T) {
	e, _ := newEngine(t, nil)
	defer func() {
		if recover() == nil {
			t.Fatal("negative cost did not panic")
		}
	}()
	e.Admit("a", -1)
}

func TestAdmitAllocatesNothing(t *testing.T) {
	for _, shards := range []int{1, 4} {
		e, clk := newEngine(t, func(c *Config) {
			c.Shards = shards
			c.Rate = 1e6
			c.Burst = 1e6
			c.MaxConcurrent = 10
			c.Funding = 1 << 40
		})
		admitOnce(t, e, "tenant-1", 1)
		aff := ClaimAffinity()
		allocs := testing.AllocsPerRun(1000, func() {
			clk.Advance(time.Microsecond)
			p, o := e.Admit("tenant-1", 1)
			if o != Admitted {
				t.Fatalf("outcome %v", o)
			}
			p.Release()
			p, _ = e.AdmitAt(aff, "tenant-1", 1)
			p.Release()
		})
		if allocs != 0 {
			t.Errorf("shards=%d: %v allocations per Admit+Release, want 0", shards, allocs)
		}
	}
}

// TestGaugeNeverExceedsLimit hammers a few accounts from many goroutines,
// some with explicit affinities, and checks with an independent counter that
// no more than MaxConcurrent permits are ever held at once.
func TestGaugeNeverExceedsLimit(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			const limit, goroutines, calls, accounts = 3, 32, 400, 2
			e, _ := newEngine(t, func(c *Config) { c.Shards = shards; c.MaxConcurrent = limit })
			var held [accounts]atomic.Int64
			var worst [accounts]atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					aff := ClaimAffinity()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range calls {
						k := r.IntN(accounts)
						var p Permit
						var o Outcome
						if g%2 == 0 {
							p, o = e.Admit(fmt.Sprint("acct-", k), 1)
						} else {
							p, o = e.AdmitAt(aff, fmt.Sprint("acct-", k), 1)
						}
						if o != Admitted {
							if o != RejectedConcurrency {
								t.Errorf("outcome %v", o)
							}
							continue
						}
						n := held[k].Add(1)
						for {
							w := worst[k].Load()
							if n <= w || worst[k].CompareAndSwap(w, n) {
								break
							}
						}
						runtime.Gosched()
						held[k].Add(-1)
						p.Release()
					}
				}()
			}
			wg.Wait()
			for k := range accounts {
				if w := worst[k].Load(); w > limit || w < 1 {
					t.Errorf("account %d: worst concurrency %d, want 1..%d", k, w, limit)
				}
			}
			if n := e.InFlight(); n != 0 {
				t.Errorf("InFlight = %d after all releases", n)
			}
			for k := range accounts {
				checkCreditConserved(t, e, fmt.Sprint("acct-", k), limit)
			}
		})
	}
}

// checkCreditConserved asserts, at rest, that an account's concurrency
// credit (shards plus pool) adds up to the limit: none minted, none lost.
func checkCreditConserved(tb testing.TB, e *Engine, account string, limit uint64) {
	tb.Helper()
	a := e.accounts.lookup(maphash.String(e.seed, account), account)
	if a == nil {
		tb.Fatalf("account %q not held", account)
	}
	total := a.pool.Load()
	for i := range a.shards {
		total += a.shards[i].units.Load() >> creditShift
	}
	if total != limit {
		tb.Errorf("account %q: credit in shards and pool = %d, want the limit %d", account, total, limit)
	}
}

// affinityForShard claims affinities until one maps to shard i.
func affinityForShard(e *Engine, i int) Affinity {
	for {
		if aff := ClaimAffinity(); uint64(aff)&e.shardMask == uint64(i) {
			return aff
		}
	}
}

// TestCreditMovesBetweenShards checks that partitioning the gauge never
// strands capacity: at rest, any one shard can admit the whole limit, even
// right after another shard held all of it.
func TestCreditMovesBetweenShards(t *testing.T) {
	const limit = 5
	e, _ := newEngine(t, func(c *Config) { c.Shards = 4; c.MaxConcurrent = limit })
	var affs [4]Affinity
	for i := range affs {
		affs[i] = affinityForShard(e, i)
	}
	for round, i := range []int{0, 1, 3, 0, 2} {
		var ps []Permit
		for n := range limit {
			p, o := e.AdmitAt(affs[i], "a", 1)
			if o != Admitted {
				t.Fatalf("round %d: admission %d on shard %d = %v, want admitted", round, n, i, o)
			}
			ps = append(ps, p)
		}
		other := affs[(i+1)%4]
		if _, o := e.AdmitAt(other, "a", 1); o != RejectedConcurrency {
			t.Fatalf("round %d: admission past the limit on another shard = %v, want rejected_concurrency", round, o)
		}
		for j := range ps {
			ps[j].Release()
		}
		checkCreditConserved(t, e, "a", limit)
	}
}

// TestLineNeverOverdrawn funds one account and lets many goroutines spend
// it with random costs: admitted units must never exceed funding plus the
// overage allowance, and with unit costs they must reach it exactly.
func TestLineNeverOverdrawn(t *testing.T) {
	for _, shards := range []int{1, 8} {
		for _, unit := range []bool{true, false} {
			t.Run(fmt.Sprintf("shards=%d/unit=%v", shards, unit), func(t *testing.T) {
				const funding, allowance = 5000, 300
				e, _ := newEngine(t, func(c *Config) {
					c.Shards = shards
					c.LeaseSize = 16
					c.OverageAllowance = allowance
				})
				if _, err := e.Fund("t", funding); err != nil {
					t.Fatal(err)
				}
				var admitted, calls atomic.Int64
				var wg sync.WaitGroup
				for g := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(g), 7))
						aff := ClaimAffinity()
						rejected := 0
						for rejected < 50 {
							cost := int64(1)
							if !unit {
								cost = 1 + r.Int64N(20)
							}
							var p Permit
							var o Outcome
							if g%2 == 0 {
								p, o = e.Admit("t", cost)
							} else {
								p, o = e.AdmitAt(aff, "t", cost)
							}
							calls.Add(1)
							switch o {
							case Admitted:
								admitted.Add(cost)
								p.Release()
							case RejectedQuota:
								rejected++
							default:
								t.Errorf("outcome %v", o)
								return
							}
						}
					}()
				}
				wg.Wait()
				got := admitted.Load()
				if got > funding+allowance {
					t.Fatalf("admitted %d units, funding %d + allowance %d", got, funding, allowance)
				}
				l := mustLine(t, e, "t")
				if unit && got != funding+allowance {
					t.Fatalf("admitted %d unit-cost admissions, want exactly %d", got, funding+allowance)
				}
				// Conservation: what was spent plus what remains is what was funded.
				if spent := got - l.Overage; spent+l.Balance+l.Leased != funding {
					t.Fatalf("spent %d + balance %d + leased %d != funding %d (overage %d)", spent, l.Balance, l.Leased, funding, l.Overage)
				}
				if l.Overage > allowance || l.Overage < 0 {
					t.Fatalf("overage %d outside [0, %d]", l.Overage, allowance)
				}
				if tot := e.Tallies().Total(); tot != uint64(calls.Load()) {
					t.Fatalf("tallies sum to %d, %d calls made", tot, calls.Load())
				}
			})
		}
	}
}

// TestTalliesSumToCalls produces every outcome, first deterministically and
// then in a random mix from many goroutines, and checks that the engine's
// tallies match what the calls returned, outcome by outcome.
func TestTalliesSumToCalls(t *testing.T) {
	const goroutines, calls = 16, 500
	e, clk := newEngine(t, func(c *Config) {
		c.Shards = 4
		c.MaxConcurrent = 2
		c.Rate = 1000
		c.Burst = 40
		c.Funding = 50
		c.MaxAccounts = 8
	})
	var want [numOutcomes]atomic.Uint64
	admit := func(account string, cost int64) (Permit, Outcome) {
		p, o := e.Admit(account, cost)
		want[o].Add(1)
		return p, o
	}
	expect := func(account string, cost int64, o Outcome) Permit {
		t.Helper()
		p, got := admit(account, cost)
		if got != o {
			t.Fatalf("Admit(%q, %d) = %v, want %v", account, cost, got, o)
		}
		return p
	}

	// Every outcome once, on purpose.
	if _, err := e.Fund("broke", 0); err != nil { // metered, empty, pinned
		t.Fatal(err)
	}
	expect("broke", 1, RejectedQuota)
	expect("acct-0", 41, RejectedRate) // more than the whole burst
	c1 := expect("acct-0", 1, Admitted)
	c2 := expect("acct-0", 1, Admitted)
	expect("acct-0", 1, RejectedConcurrency)
	for i := range 6 { // fill the table with pinned accounts: 8 = broke, acct-0, 6 more
		if _, err := e.Fund(fmt.Sprint("paid-", i), 10); err != nil {
			t.Fatal(err)
		}
	}
	expect("stranger", 1, RejectedCapacity)
	c1.Release()
	c2.Release()
	for i := range 6 {
		e.Forget(fmt.Sprint("paid-", i))
	}

	// The mix.
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			var held []Permit
			for i := range calls {
				if g == 0 && i%10 == 0 {
					clk.Advance(5 * time.Millisecond)
				}
				acct := "broke"
				if r.IntN(8) != 0 {
					acct = fmt.Sprint("acct-", r.IntN(12))
				}
				p, o := admit(acct, 1+r.Int64N(3))
				if o == Admitted {
					held = append(held, p)
				}
				if len(held) > 0 && r.IntN(2) == 0 {
					held[0].Release()
					held = held[1:]
				}
			}
			for i := range held {
				held[i].Release()
			}
		}()
	}
	wg.Wait()
	got := e.Tallies()
	var total uint64
	for _, o := range Outcomes() {
		total += want[o].Load()
		if got.Of(o) != want[o].Load() {
			t.Errorf("%v: tallied %d, returned %d", o, got.Of(o), want[o].Load())
		}
	}
	if got.Total() != total || total != goroutines*calls+6 {
		t.Fatalf("tallies total %d, calls %d (want %d)", got.Total(), total, goroutines*calls+6)
	}
	// Account tallies never count more than the calls that reached accounts.
	var perAccount uint64
	e.accounts.eachLive(func(a *account) { perAccount += e.lineOf(a).Tallies.Total() })
	if perAccount > got.Total()-got.RejectedCapacity {
		t.Errorf("account tallies %d exceed calls that reached accounts %d", perAccount, got.Total()-got.RejectedCapacity)
	}
	if l := mustLine(t, e, "broke"); l.Tallies.RejectedQuota == 0 || l.Tallies.Admitted != 0 {
		t.Errorf("broke: %+v", l.Tallies)
	}
	if n := e.InFlight(); n != 0 {
		t.Errorf("InFlight = %d", n)
	}
}

func TestFundMetersRepaysAndRecalls(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Shards = 4; c.LeaseSize = 10; c.OverageAllowance = 5 })
	// Unfunded accounts are unlimited.
	for range 100 {
		admitOnce(t, e, "t", 7)
	}
	if l := mustLine(t, e, "t"); l.Metered || l.Pinned {
		t.Fatalf("default account: %+v, want unlimited and unpinned", l)
	}
	l, err := e.Fund("t", 25)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Metered || !l.Pinned || l.Balance != 25 || l.Leased != 0 {
		t.Fatalf("after Fund: %+v", l)
	}
	aff := ClaimAffinity()
	p, o := e.AdmitAt(aff, "t", 3)
	if o != Admitted {
		t.Fatalf("outcome %v", o)
	}
	p.Release()
	l = mustLine(t, e, "t")
	if l.Balance != 15 || l.Leased != 7 {
		t.Fatalf("after one admission of 3 with lease 10: balance %d leased %d, want 15 and 7", l.Balance, l.Leased)
	}
	// Spend everything plus overage: 22 left + 5 overage.
	spent := int64(0)
	for {
		p, o := e.AdmitAt(aff, "t", 2)
		if o == RejectedQuota {
			break
		}
		if o != Admitted {
			t.Fatalf("outcome %v", o)
		}
		spent += 2
		p.Release()
	}
	// 22 units in 2s = 11 admissions, then two more from the overage
	// allowance; the last unit of allowance still admits a cost of 1.
	if spent != 22+4 {
		t.Fatalf("spent %d units, want 26", spent)
	}
	admitOnce(t, e, "t", 1)
	if _, o := e.Admit("t", 1); o != RejectedQuota {
		t.Fatalf("past the allowance: %v", o)
	}
	l = mustLine(t, e, "t")
	if l.Overage != 5 || l.Balance != 0 || l.Leased != 0 {
		t.Fatalf("exhausted: %+v", l)
	}
	// Funding repays overage first.
	l, _ = e.Fund("t", 8)
	if l.Overage != 0 || l.Balance != 3 {
		t.Fatalf("after funding 8 with 5 overage: %+v, want balance 3, overage 0", l)
	}
	if _, err := e.Fund("t", -1); err == nil {
		t.Fatal("negative funding accepted")
	}
	// Recall: park units in leases, fund again, see them back on the line.
	admitOnce(t, e, "t", 1)
	if l := mustLine(t, e, "t"); l.Leased == 0 {
		t.Fatalf("expected a lease after admitting: %+v", l)
	}
	l, _ = e.Fund("t", 0)
	if l.Leased != 0 || l.Balance != 2 {
		t.Fatalf("Fund(0) should recall leases: %+v", l)
	}
}

func TestDefaultFundingMetersNewAccounts(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Funding = 5; c.LeaseSize = 2 })
	for range 5 {
		admitOnce(t, e, "t", 1)
	}
	if _, o := e.Admit("t", 1); o != RejectedQuota {
		t.Fatalf("6th unit: %v, want rejected_quota", o)
	}
	if l := mustLine(t, e, "t"); !l.Metered || l.Pinned {
		t.Fatalf("%+v: want metered, unpinned", l)
	}
	// Fund tops up what the default left; a line Fund creates starts empty.
	if l, _ := e.Fund("t", 3); l.Balance+l.Leased != 3 {
		t.Fatalf("top-up: %+v", l)
	}
	if l, _ := e.Fund("new", 3); l.Balance != 3 {
		t.Fatalf("Fund-created line: %+v, want balance 3 (no default funding)", l)
	}
}

// TestRateRejectionDoesNotSpendQuota checks the order: rate is decided
// before quota is debited.
func TestRateRejectionDoesNotSpendQuota(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Rate = 10; c.Burst = 2 })
	e.Fund("t", 100)
	admitOnce(t, e, "t", 2)
	if _, o := e.Admit("t", 1); o != RejectedRate {
		t.Fatalf("outcome %v, want rejected_rate", o)
	}
	l := mustLine(t, e, "t")
	if l.Balance+l.Leased != 98 {
		t.Fatalf("balance %d + leased %d, want 98", l.Balance, l.Leased)
	}
	if l.Tallies.RejectedRate != 1 || l.Tallies.Admitted != 1 {
		t.Fatalf("tallies %+v", l.Tallies)
	}
}

func TestContentionRecordingAndHottest(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Shards = 2 })
	for i := range 12 {
		admitOnce(t, e, fmt.Sprint("acct-", i), 1)
	}
	// The request path hands finish its register count; drive it directly,
	// since a lost compare-exchange cannot be forced from a test.
	for i := range 12 {
		a := e.accounts.lookup(hashOf(e, fmt.Sprint("acct-", i)), fmt.Sprint("acct-", i))
		e.finish(a, &a.shards[0], &e.tallies[0], Admitted, uint64(i))
	}
	r := e.Report()
	if r.Contention.ContendedExchanges != 66 { // 0+1+…+11
		t.Fatalf("contended %d, want 66", r.Contention.ContendedExchanges)
	}
	if len(r.Contention.Hottest) != HottestAccounts {
		t.Fatalf("hottest has %d entries", len(r.Contention.Hottest))
	}
	for i, h := range r.Contention.Hottest {
		if want := fmt.Sprint("acct-", 11-i); h.Account != want || h.ContendedExchanges != uint64(11-i) {
			t.Errorf("hottest[%d] = %+v, want %s with %d", i, h, want, 11-i)
		}
	}
	if l := mustLine(t, e, "acct-7"); l.ContendedExchanges != 7 {
		t.Errorf("Line(acct-7).ContendedExchanges = %d", l.ContendedExchanges)
	}
	if e.ContendedExchanges() != 66 {
		t.Errorf("ContendedExchanges() = %d", e.ContendedExchanges())
	}
}

func hashOf(e *Engine, key string) uint64 { return maphash.String(e.seed, key) }

// TestContentionIsObserved drives real contention on one account's gauge
// from two Ps and expects the report to name it.
func TestContentionIsObserved(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	e, _ := newEngine(t, func(c *Config) { c.MaxConcurrent = 1 << 20 })
	deadline := time.Now().Add(10 * time.Second)
	for e.ContendedExchanges() == 0 && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 200000 && (i%1024 != 0 || e.ContendedExchanges() == 0); i++ {
					p, _ := e.Admit("hot", 1)
					p.Release()
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	r := e.Report()
	if r.Contention.ContendedExchanges == 0 {
		t.Fatal("no lost exchange observed in 10 s of contention on one gauge")
	}
	if len(r.Contention.Hottest) != 1 || r.Contention.Hottest[0].Account != "hot" ||
		r.Contention.Hottest[0].ContendedExchanges != r.Contention.ContendedExchanges {
		t.Fatalf("hottest = %+v, want [hot] with the whole count", r.Contention.Hottest)
	}
}

func TestReportInFlightAndAccounts(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Shards = 2 })
	p1 := mustAdmit(t, e, "a", 1)
	p2 := mustAdmit(t, e, "b", 1)
	r := e.Report()
	if r.Accounts != 2 || r.InFlight != 2 || e.InFlight() != 2 || e.Accounts() != 2 {
		t.Fatalf("report %+v", r)
	}
	p1.Release()
	p2.Release()
	if e.Report().InFlight != 0 {
		t.Fatal("in flight after release")
	}
	if _, ok := e.Line("never-seen"); ok {
		t.Fatal("Line created an account")
	}
	if e.Accounts() != 2 {
		t.Fatal("Line changed the account count")
	}
}

// TestLeaseRemainderPlusOverage covers a cost larger than what is left: the
// lease's remainder is spent and only the difference is overage.
func TestLeaseRemainderPlusOverage(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.LeaseSize = 3; c.OverageAllowance = 1 })
	e.Fund("t", 3)
	admitOnce(t, e, "t", 2) // lease 1, line 0
	admitOnce(t, e, "t", 2) // lease 1 + overage 1
	l := mustLine(t, e, "t")
	if l.Overage != 1 || l.Leased != 0 || l.Balance != 0 || l.Shards[0].Overage != 1 {
		t.Fatalf("%+v", l)
	}
	if _, o := e.Admit("t", 1); o != RejectedQuota {
		t.Fatalf("outcome %v", o)
	}
	// A rejected debit gives the lease remainder back.
	e.Fund("t", 1) // repays the overage: balance stays 0
	if l := mustLine(t, e, "t"); l.Overage != 0 || l.Balance != 0 {
		t.Fatalf("%+v", l)
	}
}
