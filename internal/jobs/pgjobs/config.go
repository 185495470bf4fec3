package pgjobs

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/cellgate/cellgate/internal/config"
)

// ClaimMode is the order in which claims hand out ready jobs.
type ClaimMode string

const (
	// ClaimFair hands out jobs by turns across the tenants that have ready
	// jobs: a tenant of weight w gets w turns per round (one without
	// limits), and each turn takes the tenant's best ready job by priority,
	// then age, within its room under its cap.
	ClaimFair ClaimMode = "fair"
	// ClaimFIFO hands out the oldest ready job first, whatever its tenant.
	ClaimFIFO ClaimMode = "fifo"
)

// Defaults of Config. They live here and nowhere else (the spec's defaults in
// schema/cellgate.cue are the same values).
const (
	DefaultClaim           = ClaimFair
	DefaultRescueAfter     = 5 * time.Minute
	DefaultRetention       = 24 * time.Hour
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 10 * time.Second
	DefaultPollInterval    = time.Second
	DefaultClaimBatch      = 128
	DefaultCompleteBatch   = 512
	DefaultCompleteFlush   = 5 * time.Millisecond
	DefaultCompleteConfirm = time.Second
	DefaultInsertBatch     = 256
	DefaultInserters       = 1
	DefaultCapLookahead    = 256
	DefaultRetentionEvery  = time.Minute
	DefaultVacuumEvery     = time.Second
	DefaultVacuumDeadRows  = 10000
	DefaultLimitsEvery     = time.Second
)

// PrefetchOff as Config.Prefetch makes every claim take jobs only for the
// workers waiting in Claim.
const PrefetchOff = -1

// Config is the PostgreSQL job backend's configuration (`jobs.postgres`,
// plus tuning knobs the spec does not expose). The zero value is valid:
// every zero field takes its default.
type Config struct {
	// ShardLocal makes a jobs table on every shard and runs workers and a
	// maintenance loop per shard (`jobs.postgres.shard_local`). New reads
	// it; NewPool and NewDB ignore it.
	ShardLocal bool
	// Claim is the claim order (`jobs.postgres.claim`). "" means ClaimFair.
	Claim ClaimMode
	// RescueAfter (`jobs.postgres.rescue_after`): a running job whose
	// process has not refreshed its heartbeat for this long is made
	// available again (or failed, if it used its last attempt). Heartbeats
	// are sent every RescueAfter/4. 0 means DefaultRescueAfter.
	RescueAfter time.Duration
	// Retention (`jobs.postgres.retention`) is how long completed and failed
	// jobs stay in the table. 0 means DefaultRetention.
	Retention time.Duration
	// BreakerFailures (`jobs.postgres.breaker_failures`) is the number of
	// consecutive failed plain enqueues that opens the circuit breaker of
	// the control database. 0 means DefaultBreakerFailures.
	BreakerFailures int
	// BreakerCooldown (`jobs.postgres.breaker_cooldown`) is how long an open
	// breaker rejects enqueues before it lets one probe through. 0 means
	// DefaultBreakerCooldown.
	BreakerCooldown time.Duration

	// PollInterval bounds how long an idle worker waits without a
	// notification before it looks for work again (jobs scheduled by other
	// processes, a lost LISTEN connection). 0 means DefaultPollInterval.
	PollInterval time.Duration
	// ClaimBatch caps the jobs one claim round trip takes (one per waiting
	// worker, plus the prefetch). 0 means DefaultClaimBatch.
	ClaimBatch int
	// Prefetch caps the jobs claimed ahead of the workers, which the
	// backend sizes to what its workers asked for during the previous
	// claim's round trip (see fetch.go). They are 'running' in the table
	// (and count toward per-kind caps) while they wait in this process.
	// 0 means one per worker; PrefetchOff turns prefetching off.
	Prefetch int
	// CompleteBatch is the number of buffered completions that triggers a
	// flush. 0 means DefaultCompleteBatch.
	CompleteBatch int
	// CompleteFlush is the longest a completion waits in the buffer.
	// 0 means DefaultCompleteFlush.
	CompleteFlush time.Duration
	// CompleteConfirm is how often the completions written since the last
	// confirmation are made durable: completions are committed without
	// waiting for the WAL flush, so a database crash can lose the last of
	// them; a confirmation writes them again in one transaction that does
	// wait (a no-op for those already recorded), and one that fails is
	// retried with backoff until it succeeds or the backend closes.
	// 0 means DefaultCompleteConfirm.
	CompleteConfirm time.Duration
	// InsertBatch caps the plain enqueues written by one INSERT.
	// 0 means DefaultInsertBatch.
	InsertBatch int
	// Inserters is the number of INSERTs of plain enqueues in flight at
	// once (each holds a pool connection meanwhile). 0 means
	// DefaultInserters.
	Inserters int
	// CapLookahead bounds how far a FIFO claim looks past jobs of kinds
	// that are at their concurrency cap (a fair claim looks within each
	// named tenant's own jobs). 0 means DefaultCapLookahead.
	CapLookahead int
	// RetentionEvery is how often the maintenance leader deletes expired
	// jobs. 0 means DefaultRetentionEvery.
	RetentionEvery time.Duration
	// VacuumEvery is how often the maintenance leader checks the table's
	// dead rows. 0 means DefaultVacuumEvery.
	VacuumEvery time.Duration
	// MaintenanceEvery is the period of the maintenance connection's loop
	// (heartbeats, leader election, rescue) and the grace of a periodic
	// job's period (seen later than this, it was missed). 0 means
	// RescueAfter/4, within [10ms, 30s].
	MaintenanceEvery time.Duration
	// VacuumDeadRows is the dead-row count (pg_stat_user_tables.n_dead_tup)
	// at which the leader runs VACUUM on the table. 0 means
	// DefaultVacuumDeadRows.
	VacuumDeadRows int
	// LimitsEvery is how often each process writes the current per-tenant
	// limits (Options.Limits) of every tenant in the database's limits
	// table. 0 means DefaultLimitsEvery.
	LimitsEvery time.Duration
}

// FromConfig maps the spec's `jobs.postgres` block onto Config.
func FromConfig(c config.JobsPostgres) Config {
	return Config{
		ShardLocal:      c.ShardLocal,
		Claim:           ClaimMode(c.Claim),
		RescueAfter:     c.RescueAfter.D(),
		Retention:       c.Retention.D(),
		BreakerFailures: c.BreakerFailures,
		BreakerCooldown: c.BreakerCooldown.D(),
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Claim = cmp.Or(c.Claim, DefaultClaim)
	c.RescueAfter = cmp.Or(c.RescueAfter, DefaultRescueAfter)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.BreakerFailures = cmp.Or(c.BreakerFailures, DefaultBreakerFailures)
	c.BreakerCooldown = cmp.Or(c.BreakerCooldown, DefaultBreakerCooldown)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.ClaimBatch = cmp.Or(c.ClaimBatch, DefaultClaimBatch)
	c.CompleteBatch = cmp.Or(c.CompleteBatch, DefaultCompleteBatch)
	c.CompleteFlush = cmp.Or(c.CompleteFlush, DefaultCompleteFlush)
	c.CompleteConfirm = cmp.Or(c.CompleteConfirm, DefaultCompleteConfirm)
	c.InsertBatch = cmp.Or(c.InsertBatch, DefaultInsertBatch)
	c.Inserters = cmp.Or(c.Inserters, DefaultInserters)
	c.CapLookahead = cmp.Or(c.CapLookahead, DefaultCapLookahead)
	c.RetentionEvery = cmp.Or(c.RetentionEvery, DefaultRetentionEvery)
	c.VacuumEvery = cmp.Or(c.VacuumEvery, DefaultVacuumEvery)
	c.VacuumDeadRows = cmp.Or(c.VacuumDeadRows, DefaultVacuumDeadRows)
	c.LimitsEvery = cmp.Or(c.LimitsEvery, DefaultLimitsEvery)
	return c
}

// Validate reports every invalid field of c (after defaults), each named by
// its spec path.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Claim != ClaimFair && c.Claim != ClaimFIFO {
		errs = append(errs, fmt.Errorf("jobs.postgres.claim: must be %q or %q, got %q", ClaimFair, ClaimFIFO, c.Claim))
	}
	pos := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %s", name, d))
		}
	}
	posInt := func(name string, n int) {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %d", name, n))
		}
	}
	pos("jobs.postgres.rescue_after", c.RescueAfter)
	pos("jobs.postgres.retention", c.Retention)
	posInt("jobs.postgres.breaker_failures", c.BreakerFailures)
	pos("jobs.postgres.breaker_cooldown", c.BreakerCooldown)
	pos("jobs.postgres.poll_interval", c.PollInterval)
	posInt("jobs.postgres.claim_batch", c.ClaimBatch)
	if c.Prefetch < PrefetchOff {
		errs = append(errs, fmt.Errorf("jobs.postgres.prefetch: must be >= 0 (or PrefetchOff), got %d", c.Prefetch))
	}
	posInt("jobs.postgres.complete_batch", c.CompleteBatch)
	pos("jobs.postgres.complete_flush", c.CompleteFlush)
	pos("jobs.postgres.complete_confirm", c.CompleteConfirm)
	posInt("jobs.postgres.insert_batch", c.InsertBatch)
	posInt("jobs.postgres.inserters", c.Inserters)
	posInt("jobs.postgres.cap_lookahead", c.CapLookahead)
	pos("jobs.postgres.retention_every", c.RetentionEvery)
	pos("jobs.postgres.vacuum_every", c.VacuumEvery)
	posInt("jobs.postgres.vacuum_dead_rows", c.VacuumDeadRows)
	pos("jobs.postgres.limits_every", c.LimitsEvery)
	pos("jobs.postgres.maintenance_every", c.MaintenanceEvery)
	return errors.Join(errs...)
}

// tick is the period of the maintenance connection's loop: heartbeats,
// leader election and rescue all run on it. A quarter of RescueAfter keeps
// a live job's heartbeat well inside the rescue window.
func (c Config) tick() time.Duration {
	if c.MaintenanceEvery > 0 {
		return c.MaintenanceEvery
	}
	return min(max(c.RescueAfter/4, 10*time.Millisecond), 30*time.Second)
}
