// Package admission is cellgate's per-account admission engine: the
// library under the server's tenant bulkheads, rate limits and quotas. It
// has no HTTP or database dependency.
//
// An Engine keeps, per account (tenant id), an exact concurrency limit, an optional
// token bucket and an optional funding line. Admit returns a Permit and
// Admitted, or a typed rejection: RejectedConcurrency, RejectedRate,
// RejectedQuota (line and overage allowance exhausted) or RejectedCapacity
// (account table full). Permit.Release returns the concurrency unit; rate
// and quota units are spent. The control plane funds and reads lines (Fund,
// Line, Forget) and reads reports (Report, Tallies, Occupancy, InFlight).
// A server wanting two per-tenant caps (requests and database connections)
// uses two engines: an engine with only MaxConcurrent set does one
// compare-exchange on its shard's concurrency word, one lock-free lookup
// and two local tally increments per admission.
//
// # Concurrency contract
//
// Every method of Engine is safe for concurrent use. Admit, AdmitAt and
// Permit.Release take no lock and allocate nothing once the account exists;
// the first admission of an account creates it under one of 256 stripe
// locks (the only lock an admission can meet). Control-plane calls (Fund,
// Forget, Line, Report, Sweep) never block admissions of other stripes and
// never block reads. A Permit must be released exactly once by one owner;
// Release through the same variable twice is a no-op (see Permit.Release).
//
// # Layout
//
// Config.Shards selects the layout. Single (one shard, the default) keeps
// one copy of each account's hot state. With N shards (a power of two) each
// account has N copies of the mutable hot state — a lease of admission units
// taken from the funding line, the overage debits, a token bucket holding
// rate/N and burst/N, concurrency credit, and outcome tallies — each padded
// to 128 bytes, and an admission touches only the copy its affinity
// selects. The funding line and the overage counter stay shared by all
// shards; the concurrency limit is partitioned into credit that moves
// between shards and a shared pool on slow paths (units.go), and stays
// exact. The engine-wide outcome tallies are always
// partitioned per locality, in a power of two of partitions at least
// max(Shards, GOMAXPROCS), because a tally is a sum however it is split
// (Layout reports both). AvailableParallelism returns GOMAXPROCS and
// ShardsFor rounds it to a shard count. docs/admission.md says when
// sharding pays, what it costs, and how to read the reports.
//
// # Locality
//
// Go has no thread identity. By default an admission's affinity comes from
// the P (processor) the goroutine runs on, found with the runtime's
// procPin/procUnpin — the pair sync.Pool uses for its per-P caches — and
// mapped on first use to a number from the process-global affinity counter.
// With Shards >= GOMAXPROCS no two running goroutines share a shard.
//
// Calling procPin through go:linkname is safe here because: the runtime
// marks procPin and procUnpin as supported linkname targets ("Do not remove
// or change the type signature", go.dev/issue/67401), so the linker accepts
// the reference without -checklinkname=0 and a removal would fail the
// build, not miscompile it; the pinned region is one field read (pin,
// read the P id, unpin), so nothing runs with preemption disabled; and the
// P index is used only as a cache-locality hint after unpinning — the
// goroutine may migrate at once, two goroutines may use the same shard, and
// every shard field is an atomic, so correctness never depends on it. If
// the link ever goes away, build with -tags cellgate_nolinkname: the engine
// then picks pseudo-P indexes from the runtime's per-M random source.
//
// Embedders that admit from goroutines of their own (job workers) call
// ClaimAffinity once per goroutine and AdmitAt; affinities come from the same
// never-recycled counter and land on shard affinity mod Shards. Control-plane
// calls never look up the current P and claim nothing; Observer is a fixed
// affinity for control-plane code that must admit.
//
// # Rate accuracy
//
// Each shard bucket is a GCRA (a token bucket kept as one int64 theoretical
// arrival time, updated by compare-exchange). Burst is split into integer
// shares that sum exactly to Burst (the first Burst mod N shards get one
// more), and each bucket refills at Rate × share/Burst, with its interval
// rounded up to whole nanoseconds, so no bucket runs fast. An admission
// whose own bucket cannot cover it tries the sibling buckets (slow path), so
// an account served from a single P still gets its whole rate. Because each
// bucket obeys its own bound and the shares sum to the totals, partitioning
// allows no over-admission: over any window W, admitted units <= Rate × W +
// Burst, with zero partition slack, under every layout. What partitioning
// costs is under-admission: a single admission's cost must fit one share
// (cost <= ceil(Burst/N)), and an idle account's burst can only be spent
// through the slow path once its own share is gone.
//
// When Burst < N, only Burst shards get a share (of one unit, and Rate/Burst
// each); admissions landing on the others always take the slow path to a
// sibling, so that account behaves like SINGLE with a longer path, and its
// bound is unchanged.
//
// The request path never reads the OS clock. It reads a coarse clock: a
// cell that a ticker goroutine advances every CoarseResolution (1 ms) while
// any rate-limited engine is open. The bucket therefore sees time up to one
// resolution late, plus however long the Go scheduler delays the ticker
// under CPU saturation. A late clock only makes decisions stricter; the
// bound above holds on the engine's clock, and measured against real time
// the worst-case over-admission it adds is Rate × the clock's lag at the
// window's start (at most Rate × 1 ms when the ticker is on time). Keep
// Burst/Rate well above the lag (10 ms or more) or a saturated host will
// see false rate rejections. Tests inject NewManualClock through
// Config.Clock and see exact times.
//
// # Quota
//
// A metered account's admission debits its cost from its shard's lease by
// compare-exchange. An empty lease takes the next LeaseSize units from the
// shared funding line by compare-exchange (the slow path); an empty line
// first pulls the sibling shards' leases back, then covers the rest from the
// overage allowance. Admitted units never exceed funded units plus
// OverageAllowance. Fund repays overage first and recalls leases; eviction
// recalls leases too, so no quota is lost in a shard.
//
// # Reports
//
// The request path counts lost compare-exchanges (lease, line and overage
// debits, concurrency acquisitions) in a register and records them once per
// admission that lost at least one. Report returns the engine total and the
// eight hottest accounts, Line the per-account count, and Occupancy the
// sharding occupancy (shards, affinities assigned, crowded shards,
// IsCrowded). All are control-plane reads of atomics; none takes a lock the
// request path takes.
//
// # Accounts and eviction
//
// The account map is 256 stripes of open-addressed tables of atomic
// pointers: reads never lock, creation locks one stripe and costs at most a
// rebuild of that stripe. Accounts are evicted when idle for IdleAfter
// (incremental sweeps on creation, or Sweep), and at MaxAccounts one is
// evicted per creation by a bounded second-chance scan; accounts with
// permits in flight and accounts pinned by Fund are never evicted. See
// evict.go for the policy in full.
//
// Retained memory per account is 256 bytes of account plus 128 bytes per
// shard, plus the key and a table slot (BenchmarkAccountMemory measures it).
package admission
