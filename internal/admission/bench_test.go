package admission

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
)

// Benchmark configuration shared by the engine and the peer, so both do the
// same work per call: a rate check that never rejects, a concurrency limit
// that is never reached, and an outcome tally.
const (
	benchRate     = 1e9     // units/s per account: far above what 2 cores can ask
	benchBurst    = 1 << 30 // units: a 1 s burst window, far above the coarse clock's lag
	benchMaxConc  = 1 << 20 // permits
	benchAccounts = 10_000
)

func benchEngine(tb testing.TB, shards int, funded bool) *Engine {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Shards = shards
	cfg.Rate = benchRate
	cfg.Burst = benchBurst
	cfg.MaxConcurrent = benchMaxConc
	if funded {
		cfg.Funding = 1 << 62 // metered, never exhausted: exercises the leases
		cfg.LeaseSize = 1024
	}
	e, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

// peerAccount is what a Go user would assemble without this package: the
// standard rate limiter, a weighted semaphore and an atomic tally.
type peerAccount struct {
	lim     *rate.Limiter
	sem     *semaphore.Weighted
	tallies [3]atomic.Uint64 // admitted, rejected by rate, rejected by concurrency
}

func newPeerAccount() *peerAccount {
	return &peerAccount{
		lim: rate.NewLimiter(rate.Limit(benchRate), benchBurst),
		sem: semaphore.NewWeighted(benchMaxConc),
	}
}

// admitRelease is the peer's Admit+Release.
func (p *peerAccount) admitRelease() bool {
	if !p.sem.TryAcquire(1) {
		p.tallies[2].Add(1)
		return false
	}
	if !p.lim.Allow() {
		p.sem.Release(1)
		p.tallies[1].Add(1)
		return false
	}
	p.tallies[0].Add(1)
	p.sem.Release(1)
	return true
}

// admitRelease is one benchmark operation. It reports a rejection with
// Errorf, which (unlike Fatal) is allowed from RunParallel's goroutines, and
// returns false so the caller stops.
func admitRelease(b *testing.B, e *Engine, account string) bool {
	p, o := e.Admit(account, 1)
	if o != Admitted {
		b.Errorf("Admit(%q) = %v: the benchmark configuration must never reject", account, o)
		return false
	}
	p.Release()
	return true
}

// parallelHotAdmits times b.N admit-and-release pairs of one tenant from
// every P, with allocations, and fails if a permit leaked.
func parallelHotAdmits(b *testing.B, e *Engine, tenant string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !admitRelease(b, e, tenant) {
				return
			}
		}
	})
	b.StopTimer()
	if n := e.InFlight(); n != 0 {
		b.Fatalf("%d permits leaked", n)
	}
}

// BenchmarkAdmitHotAccount runs Admit+Release on one account from every
// goroutine. single and sharded run the whole engine — concurrency gauge,
// rate bucket and a metered funding line (lease debits) — which is strictly
// more work per call than the peer does; the *_unmetered variants drop the
// funding line so they do exactly the peer's work (rate, concurrency,
// tally).
func BenchmarkAdmitHotAccount(b *testing.B) {
	const hot = "tenant-hot"
	perP := ShardsFor(runtime.GOMAXPROCS(0))
	engines := []struct {
		name   string
		shards int
		funded bool
	}{
		{"single", Single, true},
		{"sharded", perP, true},
		{"single_unmetered", Single, false},
		{"sharded_unmetered", perP, false},
	}
	for _, c := range engines {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b, c.shards, c.funded)
			admitRelease(b, e, hot) // create the account outside the timing
			parallelHotAdmits(b, e, hot)
		})
	}
	b.Run("peer", func(b *testing.B) {
		p := newPeerAccount()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !p.admitRelease() {
					b.Error("peer rejected")
					return
				}
			}
		})
	})
}

func benchKeys() []string {
	keys := make([]string, benchAccounts)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkAdmitManyAccounts spreads Admit+Release over 10,000 accounts at
// random, so most calls miss the caches the hot-account benchmark keeps
// warm. The engine runs with every limit on, as in the hot-account
// benchmark; the peer keeps its accounts in a sync.Map.
func BenchmarkAdmitManyAccounts(b *testing.B) {
	keys := benchKeys()
	for _, c := range []struct {
		name   string
		shards int
	}{{"single", Single}, {"sharded", ShardsFor(runtime.GOMAXPROCS(0))}} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b, c.shards, true)
			for _, k := range keys {
				admitRelease(b, e, k)
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 42))
				for pb.Next() {
					if !admitRelease(b, e, keys[r.IntN(len(keys))]) {
						return
					}
				}
			})
		})
	}
	b.Run("peer", func(b *testing.B) {
		var m sync.Map
		for _, k := range keys {
			m.Store(k, newPeerAccount())
		}
		var seed atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 42))
			for pb.Next() {
				v, _ := m.Load(keys[r.IntN(len(keys))])
				if !v.(*peerAccount).admitRelease() {
					b.Error("peer rejected")
					return
				}
			}
		})
	})
}

// memoryBatch is the number of accounts each retained-memory sample holds.
const memoryBatch = 100_000

// BenchmarkAccountMemory creates accounts (one per op) and reports the heap
// each one retains, measured over batches of 100,000 accounts in one engine
// after a GC. Keys are built per account, so only the engine's copy stays.
func BenchmarkAccountMemory(b *testing.B) {
	for _, shards := range []int{1, 8, 16} {
		b.Run("shards="+strconv.Itoa(shards), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Shards = shards
			cfg.MaxAccounts = memoryBatch
			b.ReportAllocs()
			var (
				total    float64
				accounts int
				buf      []byte
			)
			for done := 0; done < b.N; {
				n := min(memoryBatch, b.N-done)
				b.StopTimer()
				before := heapAfterGC()
				e, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := 0; i < n; i++ {
					buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(done+i), 10)
					p, o := e.Admit(string(buf), 1)
					if o != Admitted {
						b.Fatalf("outcome %v", o)
					}
					p.Release()
				}
				b.StopTimer()
				after := heapAfterGC()
				if e.Accounts() != n {
					b.Fatalf("engine holds %d accounts, want %d", e.Accounts(), n)
				}
				runtime.KeepAlive(e)
				total += float64(after) - float64(before)
				accounts += n
				done += n
				b.StartTimer()
			}
			b.ReportMetric(total/float64(accounts), "B/account")
		})
	}
}

func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkAdmitWhileConsoleReads is the hot-account admit with and without
// an operator console reading the account's in-flight count (InFlightOf, a
// lock-free load per shard) every millisecond, far more often than a page
// view does: the read adds nothing to the admit path, and the two variants
// should match within noise.
func BenchmarkAdmitWhileConsoleReads(b *testing.B) {
	const hot = "tenant-hot"
	perP := ShardsFor(runtime.GOMAXPROCS(0))
	for _, reading := range []bool{false, true} {
		name := "alone"
		if reading {
			name = "console_reading"
		}
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, perP, true)
			admitRelease(b, e, hot)
			stop, done := make(chan struct{}), make(chan struct{})
			var reads int64
			go func() {
				defer close(done)
				if !reading {
					return
				}
				t := time.NewTicker(time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if e.InFlightOf(hot) >= 0 {
							reads++
						}
					}
				}
			}()
			// Deferred: the reader stops even when a leaked permit ends
			// the benchmark.
			defer func() {
				close(stop)
				<-done
				b.ReportMetric(float64(reads), "reads")
			}()
			parallelHotAdmits(b, e, hot)
		})
	}
}

// benchLimits gives every account the benchmark's uniform limits through
// Config.Limits, so both engines do the same checks and only the
// per-account plumbing differs.
type benchLimits struct{}

func (benchLimits) Limits(string) AccountLimits {
	return AccountLimits{MaxConcurrent: benchMaxConc, Rate: benchRate, Burst: benchBurst}
}

// BenchmarkAdmissionPlans compares admit+release of one tenant with
// per-account limits (tenant plans: Config.Limits) against the uniform
// engine with the same limits. The two alternate in blocks of 1,024 pairs,
// in alternating order, so load on a shared machine falls on both alike;
// plans-over-uniform is the ratio make bench-plans reports as
// admission-cost-ratio, and allocs/op covers both engines.
func BenchmarkAdmissionPlans(b *testing.B) {
	uniform := benchEngine(b, Single, false)
	cfg := DefaultConfig()
	cfg.Limits = benchLimits{}
	plans, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plans.Close)
	admitRelease(b, uniform, "tenant-1")
	admitRelease(b, plans, "tenant-1")
	const block = 1024
	var tu, tp time.Duration
	timed := func(e *Engine, n int) time.Duration {
		start := time.Now()
		for range n {
			if !admitRelease(b, e, "tenant-1") {
				return 0
			}
		}
		return time.Since(start)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done, k := 0, 0; done < b.N; done, k = done+block, k+1 {
		n := min(block, b.N-done)
		if k%2 == 0 {
			tu += timed(uniform, n)
			tp += timed(plans, n)
		} else {
			tp += timed(plans, n)
			tu += timed(uniform, n)
		}
	}
	b.StopTimer()
	for _, e := range []*Engine{uniform, plans} {
		if n := e.InFlight(); n != 0 {
			b.Fatalf("%d permits leaked", n)
		}
	}
	b.ReportMetric(float64(tu)/float64(b.N), "uniform-ns/op")
	b.ReportMetric(float64(tp)/float64(b.N), "plans-ns/op")
	b.ReportMetric(float64(tp)/float64(tu), "plans-over-uniform")
}
