package admission

import (
	"fmt"
	"math"
	"time"
)

// Single is the default layout: one shard per account. Every goroutine that
// admits for an account shares that account's lease and rate bucket.
const Single = 1

// MaxShards is the largest shard count Config.Shards accepts.
const MaxShards = 1024

// Config configures an Engine. The zero value is not valid; start from
// DefaultConfig, which is the only place defaults are written down.
type Config struct {
	// Shards is the number of copies of each account's hot state (lease,
	// rate bucket, tallies). Single (1) is the default; otherwise a power of
	// two up to MaxShards. ShardsFor(AvailableParallelism()) gives one shard
	// per P, which is where sharding starts to pay; see docs/admission.md.
	Shards int

	// Rate is the sustained admission rate of one account in cost units per
	// second. 0 disables rate limiting.
	Rate float64

	// Burst is the number of cost units an idle account may admit at once.
	// Required (>= 1) when Rate > 0; ignored otherwise. With Shards > 1 the
	// burst is split across shard buckets (see the package doc for what that
	// costs in accuracy).
	Burst int64

	// MaxConcurrent is the exact limit on an account's admitted-but-not-
	// released permits. 0 means no limit (permits are still counted).
	MaxConcurrent int64

	// LeaseSize is how many units a shard takes from an account's funding
	// line at a time. Larger leases mean fewer shared compare-exchanges and
	// more units parked in shards (they are recalled when needed, on funding
	// and on eviction, so none are lost). Only used for metered accounts.
	LeaseSize int64

	// OverageAllowance is how many units an account may be admitted past an
	// empty funding line before it is rejected for quota. The next Fund
	// repays the overage first.
	OverageAllowance int64

	// Funding is the line each account gets when the engine creates it on
	// first use. 0 means unlimited (no quota): the control plane meters an
	// account by calling Fund. A positive value is an allowance per account
	// lifetime, and an idle account is evicted and comes back with a fresh
	// one, so it is not a durable quota; use Fund for that (funded accounts
	// are never evicted).
	Funding int64

	// IdleAfter is how long an account must go unused, with nothing in
	// flight, before a sweep may evict it. Must be > 0.
	IdleAfter time.Duration

	// MaxAccounts bounds the number of accounts held at once. Creating one
	// past it evicts an unpinned account with nothing in flight (least
	// recently seen among a bounded sample); if there is none, the admission
	// is RejectedCapacity. Must be > 0.
	MaxAccounts int

	// Limits, when set, gives every account limits of its own (a tenant's
	// plan and overrides): MaxConcurrent, Rate and Burst are then ignored,
	// the engine asks Limits when it creates an account, and again the
	// next time the account admits after Refresh. A lowered limit is exact
	// for new admissions at once; permits already past it stay until
	// released. Limits is called on slow paths only, never on an
	// admission of an account whose limits are current.
	Limits Limiter

	// Clock is the time source for rate buckets and idle eviction. nil uses
	// the process-wide coarse clock (CoarseClock, 1 ms resolution); tests
	// inject NewManualClock().
	Clock *Clock
}

// Limiter returns an account's limits; the engine calls it from slow paths
// and from any goroutine.
type Limiter interface {
	Limits(account string) AccountLimits
}

// AccountLimits are one account's limits under Config.Limits; zero
// MaxConcurrent or Rate means no limit.
type AccountLimits struct {
	// MaxConcurrent is the account's exact in-flight limit (0 = none, at
	// most MaxConcurrentLimit).
	MaxConcurrent int64
	// Rate is the account's sustained rate in cost units per second.
	Rate float64
	// Burst is the account's bucket size; >= 1 when Rate > 0.
	Burst int64
}

// DefaultConfig returns the defaults: SINGLE layout, no rate limit, no
// concurrency limit, unlimited funding, leases of 64 units, no overage,
// eviction after 10 minutes idle, at most 100,000 accounts.
func DefaultConfig() Config {
	return Config{
		Shards:           Single,
		Rate:             0,
		Burst:            0,
		MaxConcurrent:    0,
		LeaseSize:        64,
		OverageAllowance: 0,
		Funding:          0,
		IdleAfter:        10 * time.Minute,
		MaxAccounts:      100_000,
	}
}

// maxBurstNanos caps Burst/Rate (the burst window) so that bucket arithmetic
// in nanoseconds cannot overflow: 2^62 ns is about 146 years.
const maxBurstNanos = 1 << 62

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	if c.Shards < 1 || c.Shards > MaxShards || c.Shards&(c.Shards-1) != 0 {
		return fmt.Errorf("admission: Config.Shards: must be a power of two in [1, %d], got %d", MaxShards, c.Shards)
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		return fmt.Errorf("admission: Config.Rate: must be a finite number >= 0, got %v", c.Rate)
	}
	if c.Rate > 0 {
		if c.Burst < 1 {
			return fmt.Errorf("admission: Config.Burst: must be >= 1 when Rate > 0, got %d", c.Burst)
		}
		if float64(c.Burst)/c.Rate*1e9 >= maxBurstNanos/2 {
			return fmt.Errorf("admission: Config.Burst: burst window Burst/Rate = %v s is too long", float64(c.Burst)/c.Rate)
		}
	} else if c.Burst < 0 {
		return fmt.Errorf("admission: Config.Burst: must be >= 0, got %d", c.Burst)
	}
	if c.MaxConcurrent < 0 || c.MaxConcurrent > MaxConcurrentLimit {
		return fmt.Errorf("admission: Config.MaxConcurrent: must be between 0 (no limit) and %d, got %d", MaxConcurrentLimit, c.MaxConcurrent)
	}
	if c.LeaseSize < 1 {
		return fmt.Errorf("admission: Config.LeaseSize: must be >= 1, got %d", c.LeaseSize)
	}
	if c.OverageAllowance < 0 {
		return fmt.Errorf("admission: Config.OverageAllowance: must be >= 0, got %d", c.OverageAllowance)
	}
	if c.Funding < 0 {
		return fmt.Errorf("admission: Config.Funding: must be >= 0 (0 = unlimited), got %d", c.Funding)
	}
	if c.IdleAfter <= 0 {
		return fmt.Errorf("admission: Config.IdleAfter: must be > 0, got %v", c.IdleAfter)
	}
	if c.MaxAccounts < 1 {
		return fmt.Errorf("admission: Config.MaxAccounts: must be >= 1, got %d", c.MaxAccounts)
	}
	return nil
}

// ShardsFor returns the smallest valid shard count that gives every one of
// n parallel workers its own shard: n rounded up to a power of two, clamped
// to [1, MaxShards].
func ShardsFor(n int) int {
	s := 1
	for s < n && s < MaxShards {
		s <<= 1
	}
	return s
}
