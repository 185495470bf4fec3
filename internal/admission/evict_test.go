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

func TestIdleAccountsAreEvicted(t *testing.T) {
	const idle = time.Minute
	e, clk := newEngine(t, func(c *Config) { c.IdleAfter = idle; c.Shards = 4 })
	for i := range 10 {
		admitOnce(t, e, fmt.Sprint("idle-", i), 1)
	}
	busy := mustAdmit(t, e, "busy", 1)
	if _, err := e.Fund("funded", 10); err != nil {
		t.Fatal(err)
	}
	clk.Advance(idle / 2)
	if n := e.Sweep(); n != 0 { // sees the admissions: marks them used now
		t.Fatalf("accounts used since the last sweep evicted: %d", n)
	}
	admitOnce(t, e, "idle-0", 1) // used again: survives the sweeps below
	clk.Advance(idle / 2)
	if n := e.Sweep(); n != 0 {
		t.Fatalf("accounts idle for half of IdleAfter evicted: %d", n)
	}
	clk.Advance(idle / 2)
	if n := e.Sweep(); n != 9 {
		t.Fatalf("evicted %d, want 9 idle accounts", n)
	}
	if _, ok := e.Line("idle-0"); !ok {
		t.Error("recently used account evicted")
	}
	if _, ok := e.Line("busy"); !ok {
		t.Error("account with a permit in flight evicted")
	}
	if _, ok := e.Line("funded"); !ok {
		t.Error("funded (pinned) account evicted")
	}
	if e.Accounts() != 3 {
		t.Fatalf("Accounts() = %d, want 3", e.Accounts())
	}
	busy.Release()
	clk.Advance(2 * idle)
	e.Sweep()
	clk.Advance(2 * idle)
	e.Sweep()
	if _, ok := e.Line("busy"); ok {
		t.Error("released idle account not evicted")
	}
	if _, ok := e.Line("funded"); !ok {
		t.Error("funded account evicted")
	}
}

// TestCyclingTenantIDsIsBounded is the attack the eviction policy exists
// for: a client cycling through tenant ids. The engine never holds more than
// MaxAccounts, every admission succeeds, and the table memory stays bounded.
func TestCyclingTenantIDsIsBounded(t *testing.T) {
	const maxAccounts = 64
	e, _ := newEngine(t, func(c *Config) { c.MaxAccounts = maxAccounts; c.MaxConcurrent = 1 })
	for i := range 20_000 {
		admitOnce(t, e, fmt.Sprint("cycle-", i), 1)
		if n := e.Accounts(); n > maxAccounts {
			t.Fatalf("after %d ids the engine holds %d accounts", i, n)
		}
	}
	slots := 0
	for i := range e.accounts.stripes {
		if tab := e.accounts.stripes[i].tab.Load(); tab != nil {
			slots += len(tab.slots)
		}
	}
	// At most maxAccounts live entries, each stripe's table at most half
	// full after a rebuild and never below 8 slots.
	if slots > 8*maxAccounts+4*maxAccounts {
		t.Fatalf("tables hold %d slots for at most %d accounts", slots, maxAccounts)
	}
}

func TestCapacityWhenNothingEvictable(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.MaxAccounts = 4 })
	var held []Permit
	for i := range 4 {
		held = append(held, mustAdmit(t, e, fmt.Sprint("busy-", i), 1))
	}
	if _, o := e.Admit("new", 1); o != RejectedCapacity {
		t.Fatalf("outcome %v, want rejected_capacity", o)
	}
	if _, err := e.Fund("new", 5); err != ErrCapacity {
		t.Fatalf("Fund at capacity: %v, want ErrCapacity", err)
	}
	if got := e.Tallies().RejectedCapacity; got != 1 {
		t.Fatalf("capacity rejections tallied %d", got)
	}
	held[2].Release()
	admitOnce(t, e, "new", 1) // busy-2 is now evictable
	if _, ok := e.Line("busy-2"); ok {
		t.Fatal("busy-2 should have made room")
	}
	for i := range held {
		held[i].Release()
	}
}

func TestPinnedAccountsAreNotEvictedUnderPressure(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.MaxAccounts = 3 })
	for i := range 3 {
		if _, err := e.Fund(fmt.Sprint("paid-", i), 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, o := e.Admit("stranger", 1); o != RejectedCapacity {
		t.Fatalf("outcome %v, want rejected_capacity", o)
	}
	if !e.Forget("paid-1") {
		t.Fatal("Forget of an idle account did not remove it")
	}
	admitOnce(t, e, "stranger", 1)
	// A forgotten account comes back with the defaults (unlimited).
	if e.Forget("stranger") != true {
		t.Fatal("Forget(stranger)")
	}
	admitOnce(t, e, "paid-1", 1)
	if l := mustLine(t, e, "paid-1"); l.Metered || l.Pinned {
		t.Fatalf("forgotten account came back as %+v", l)
	}
	if e.Forget("absent") {
		t.Fatal("Forget of an unknown account reported a removal")
	}
}

func TestForgetBusyAccountUnpinsOnly(t *testing.T) {
	e, clk := newEngine(t, func(c *Config) { c.IdleAfter = time.Second })
	e.Fund("t", 10)
	p := mustAdmit(t, e, "t", 1)
	if e.Forget("t") {
		t.Fatal("Forget removed an account with a permit in flight")
	}
	if l := mustLine(t, e, "t"); l.Pinned || l.InFlight != 1 {
		t.Fatalf("%+v", l)
	}
	p.Release()
	clk.Advance(time.Second)
	e.Sweep()
	clk.Advance(time.Second)
	if e.Sweep() != 1 {
		t.Fatal("unpinned idle account not swept")
	}
}

// TestEvictionReturnsLeases checks that the units a shard leased and did
// not spend are back on the line when the account is dropped.
func TestEvictionReturnsLeases(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.Shards = 4; c.LeaseSize = 50 })
	e.Fund("t", 1000)
	for _, a := range []Affinity{ClaimAffinity(), ClaimAffinity(), ClaimAffinity()} {
		p, o := e.AdmitAt(a, "t", 3)
		if o != Admitted {
			t.Fatal(o)
		}
		p.Release()
	}
	acct := e.accounts.lookup(maphash.String(e.seed, "t"), "t")
	if l := e.lineOf(acct); l.Leased == 0 {
		t.Fatalf("no leases outstanding: %+v", l)
	}
	if !e.Forget("t") {
		t.Fatal("Forget did not evict")
	}
	var leased int64
	for i := range acct.shards {
		leased += acct.shards[i].lease.Load()
	}
	if got := acct.line.Load(); got != 1000-9 || leased != 0 {
		t.Fatalf("after eviction line %d, leases %d; want 991 and 0", got, leased)
	}
}

// TestIncrementalSweepOnCreation checks that creation alone (no Sweep
// call) eventually evicts idle accounts.
func TestIncrementalSweepOnCreation(t *testing.T) {
	e, clk := newEngine(t, func(c *Config) { c.IdleAfter = time.Minute })
	for i := range 500 {
		admitOnce(t, e, fmt.Sprint("old-", i), 1)
	}
	for round := 0; round < 3; round++ {
		clk.Advance(time.Minute)
		// Enough creations, each after a quarter of IdleAfter, to walk
		// every stripe.
		for i := 0; i < stripeCount/sweepStripesPerCreation+1; i++ {
			clk.Advance(time.Minute / 4)
			admitOnce(t, e, fmt.Sprint("new-", round, "-", i), 1)
		}
	}
	for i := range 500 {
		if _, ok := e.Line(fmt.Sprint("old-", i)); ok {
			t.Fatalf("old-%d survived three idle periods of creations", i)
		}
	}
}

// TestEvictionRacesAdmission churns a small table from many goroutines while
// sweeps run, and checks with independent counters that no account ever
// has more than MaxConcurrent permits held: an account evicted with a permit
// in flight would let its replacement admit past the limit.
func TestEvictionRacesAdmission(t *testing.T) {
	const limit, keys = 2, 6
	e, clk := newEngine(t, func(c *Config) {
		c.MaxAccounts = 4
		c.MaxConcurrent = limit
		c.IdleAfter = time.Millisecond
		c.Shards = 2
	})
	var held [keys]atomic.Int64
	var violations, admitted atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the sweeper
		defer wg.Done()
		for !stop.Load() {
			clk.Advance(time.Millisecond)
			e.Sweep()
			runtime.Gosched()
		}
	}()
	var workers sync.WaitGroup
	for g := range 12 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 3000 {
				k := r.IntN(keys)
				p, o := e.Admit(fmt.Sprint("k", k), 1)
				if o != Admitted {
					continue
				}
				admitted.Add(1)
				if held[k].Add(1) > limit {
					violations.Add(1)
				}
				runtime.Gosched()
				held[k].Add(-1)
				p.Release()
			}
		}()
	}
	workers.Wait()
	stop.Store(true)
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d admissions exceeded the per-account limit", v)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if e.Report().Evictions == 0 {
		t.Fatal("no account was evicted: the race was not exercised")
	}
	if n := e.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d", n)
	}
	if n := e.Accounts(); n > 4 {
		t.Fatalf("Accounts = %d > MaxAccounts", n)
	}
}
