package admission

import (
	"sync"
	"testing"
)

// limitMap is a Limiter over a map the test changes between Refreshes.
type limitMap struct {
	mu sync.Mutex
	m  map[string]AccountLimits
}

func (l *limitMap) Limits(account string) AccountLimits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[account]
}

func (l *limitMap) set(account string, v AccountLimits) {
	l.mu.Lock()
	l.m[account] = v
	l.mu.Unlock()
}

func limitsEngine(tb testing.TB, shards int, lm *limitMap) (*Engine, *Clock) {
	return newEngine(tb, func(c *Config) { c.Shards = shards; c.Limits = lm })
}

// admitUpTo admits until the first refusal and returns the permits.
func admitUpTo(e *Engine, account string, most int) ([]Permit, Outcome) {
	var ps []Permit
	for range most {
		p, o := e.Admit(account, 1)
		if o != Admitted {
			return ps, o
		}
		ps = append(ps, p)
	}
	return ps, Admitted
}

func TestLimitsPerAccount(t *testing.T) {
	for _, shards := range []int{1, 4} {
		lm := &limitMap{m: map[string]AccountLimits{"free": {MaxConcurrent: 2}, "pro": {MaxConcurrent: 5}}}
		e, _ := limitsEngine(t, shards, lm)
		free, o := admitUpTo(e, "free", 100)
		if len(free) != 2 || o != RejectedConcurrency {
			t.Fatalf("shards %d: free admitted %d then %v, want 2 then concurrency", shards, len(free), o)
		}
		pro, o := admitUpTo(e, "pro", 100)
		if len(pro) != 5 || o != RejectedConcurrency {
			t.Fatalf("shards %d: pro admitted %d then %v, want 5", shards, len(pro), o)
		}
		// No limit: counted, never refused.
		none, o := admitUpTo(e, "unlisted", 1000)
		if len(none) != 1000 || o != Admitted {
			t.Fatalf("shards %d: unlimited admitted %d, %v", shards, len(none), o)
		}
		for _, ps := range [][]Permit{free, pro, none} {
			for i := range ps {
				ps[i].Release()
			}
		}
		if n := e.InFlight(); n != 0 {
			t.Fatalf("shards %d: %d leaked", shards, n)
		}
	}
}

// TestLimitsLoweredWhileInFlight lowers a cap below what is in flight: no
// new admission until the in-flight count drops below the new cap, then
// exactly the new cap.
func TestLimitsLoweredWhileInFlight(t *testing.T) {
	for _, shards := range []int{1, 4} {
		lm := &limitMap{m: map[string]AccountLimits{"acme": {MaxConcurrent: 10}}}
		e, _ := limitsEngine(t, shards, lm)
		held, _ := admitUpTo(e, "acme", 10)
		if len(held) != 10 {
			t.Fatalf("shards %d: admitted %d, want 10", shards, len(held))
		}
		// Release two, so idle credit exists when the cap drops.
		held[0].Release()
		held[1].Release()
		held = held[2:]
		lm.set("acme", AccountLimits{MaxConcurrent: 3})
		e.Refresh()
		for len(held) > 3 {
			if _, o := e.Admit("acme", 1); o != RejectedConcurrency {
				t.Fatalf("shards %d: %d in flight over a cap of 3: %v, want concurrency", shards, len(held), o)
			}
			held[0].Release()
			held = held[1:]
		}
		if _, o := e.Admit("acme", 1); o != RejectedConcurrency {
			t.Fatalf("shards %d: 3 in flight at a cap of 3: %v", shards, o)
		}
		held[0].Release()
		held = held[1:]
		more, o := admitUpTo(e, "acme", 100)
		if len(more) != 1 || o != RejectedConcurrency {
			t.Fatalf("shards %d: after settling admitted %d more, want 1", shards, len(more))
		}
		held = append(held, more...)
		// Raised: the new room is there at once.
		lm.set("acme", AccountLimits{MaxConcurrent: 6})
		e.Refresh()
		more, _ = admitUpTo(e, "acme", 100)
		if len(more) != 3 {
			t.Fatalf("shards %d: after raising to 6 admitted %d more, want 3", shards, len(more))
		}
		for _, p := range append(held, more...) {
			p.Release()
		}
		// From a number to no limit and back.
		lm.set("acme", AccountLimits{})
		e.Refresh()
		all, _ := admitUpTo(e, "acme", 500)
		if len(all) != 500 {
			t.Fatalf("shards %d: unlimited admitted %d", shards, len(all))
		}
		lm.set("acme", AccountLimits{MaxConcurrent: 1})
		e.Refresh()
		if _, o := e.Admit("acme", 1); o != RejectedConcurrency {
			t.Fatalf("shards %d: 500 in flight at a cap of 1: %v", shards, o)
		}
		for i := range all {
			all[i].Release()
		}
		if n := e.InFlight(); n != 0 {
			t.Fatalf("shards %d: %d leaked", shards, n)
		}
		p := mustAdmit(t, e, "acme", 1)
		if _, o := e.Admit("acme", 1); o != RejectedConcurrency {
			t.Fatalf("shards %d: cap 1 admitted a second", shards)
		}
		p.Release()
	}
}

func TestLimitsRatePerAccount(t *testing.T) {
	lm := &limitMap{m: map[string]AccountLimits{"slow": {Rate: 1, Burst: 2}}}
	e, clk := limitsEngine(t, 1, lm)
	admitOnce(t, e, "slow", 1)
	admitOnce(t, e, "slow", 1)
	if _, o := e.Admit("slow", 1); o != RejectedRate {
		t.Fatalf("third within the burst: %v, want rate", o)
	}
	for range 50 {
		admitOnce(t, e, "fast", 1) // no rate
	}
	lm.set("slow", AccountLimits{})
	e.Refresh()
	admitOnce(t, e, "slow", 1)
	clk.Advance(0)
}

func TestLimitsAdmitAllocatesNothing(t *testing.T) {
	lm := &limitMap{m: map[string]AccountLimits{"acme": {MaxConcurrent: 8, Rate: 1e9, Burst: 1 << 30}}}
	e, _ := limitsEngine(t, 1, lm)
	admitOnce(t, e, "acme", 1)
	if n := testing.AllocsPerRun(1000, func() {
		p, _ := e.Admit("acme", 1)
		p.Release()
	}); n != 0 {
		t.Fatalf("%v allocs per admit+release", n)
	}
}

// TestLimitsChangeUnderLoad changes a cap while goroutines admit and
// release: nothing leaks, in flight never passes the largest cap given, and
// once the load stops the last cap is exact.
func TestLimitsChangeUnderLoad(t *testing.T) {
	for _, shards := range []int{1, 4} {
		lm := &limitMap{m: map[string]AccountLimits{"acme": {MaxConcurrent: 8}}}
		e, _ := limitsEngine(t, shards, lm)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var over sync.Once
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					p, o := e.Admit("acme", 1)
					if o == Admitted {
						if n := e.InFlightOf("acme"); n > 8 {
							over.Do(func() { t.Errorf("shards %d: %d in flight over the largest cap 8", shards, n) })
						}
						p.Release()
					}
				}
			})
		}
		for i := range 200 {
			lm.set("acme", AccountLimits{MaxConcurrent: int64(1 + i%8)})
			e.Refresh()
		}
		lm.set("acme", AccountLimits{MaxConcurrent: 3})
		e.Refresh()
		close(stop)
		wg.Wait()
		if n := e.InFlight(); n != 0 {
			t.Fatalf("shards %d: %d leaked", shards, n)
		}
		ps, o := admitUpTo(e, "acme", 100)
		if len(ps) != 3 || o != RejectedConcurrency {
			t.Fatalf("shards %d: after the load %d admitted (%v), want exactly the last cap 3", shards, len(ps), o)
		}
		for i := range ps {
			ps[i].Release()
		}
	}
}
