package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cellgate/cellgate/internal/shards"
)

// ErrClosed is returned by a Backend after Close, and by Enqueue after Stop.
var ErrClosed = errors.New("jobs: closed")

// ErrNoTxEnqueue is the answer of EnqueueTx and EnqueueManyTx (a Backend's
// InsertTx and InsertManyTx) on a backend that keeps jobs outside the
// cell's databases, the local, in-memory one: it cannot join a
// transaction, and pretending to would lose the atomicity the caller asked
// for.
var ErrNoTxEnqueue = errors.New("jobs: an in-transaction enqueue needs jobs.backend = \"postgres\"; the local backend keeps jobs in memory")

// Backend stores jobs and decides which job each worker runs next. The Client
// owns everything else (encoding, handlers, retries and their delays,
// shutdown, metrics). A Client calls Open once, before anything else, and
// Close once, last; all other methods may be called concurrently.
//
// A job moves: Insert → waiting (available, or scheduled for later) → Claim →
// running → Complete (gone) | Fail (gone) | Retry (scheduled again). A backend
// must never hand one job to two Claims at once.
//
// internal/jobs/jobstest.RunConformance is the executable form of this
// contract.
type Backend interface {
	// Capabilities says which optional behaviours the backend implements.
	Capabilities() Capabilities

	// Open prepares the backend for a Client with these effective settings.
	Open(ctx context.Context, p OpenParams) error

	// Insert adds a job. When p.UniqueKey is not empty and a job with the
	// same Kind, Tenant and UniqueKey is active (waiting, running or
	// scheduled for a retry), Insert adds nothing and returns that job's id
	// with Duplicate set.
	Insert(ctx context.Context, p InsertParams) (EnqueueResult, error)

	// InsertTx is Insert written with the caller's transaction tx, behind
	// Client.EnqueueTx: it returns once the row is written, and the job
	// exists if and only if tx commits. A backend that keeps jobs outside
	// the cell's databases answers ErrNoTxEnqueue.
	InsertTx(ctx context.Context, tx shards.Tx, p InsertParams) (EnqueueResult, error)

	// InsertMany is Insert for every element of ps, behind
	// Client.EnqueueMany: one result per element, in ps's order, each as
	// Insert would give it (a duplicate of an active job, or of an earlier
	// element with the same Kind, Tenant and UniqueKey, has Duplicate set
	// and that job's id). A backend that stores jobs in a database inserts
	// them all or none, with one round trip; one that cannot may insert
	// them one by one and stop at the first error with the results so far.
	InsertMany(ctx context.Context, ps []InsertParams) ([]EnqueueResult, error)

	// InsertManyTx is InsertMany written with tx, behind
	// Client.EnqueueManyTx; whether the jobs exist is up to tx's commit.
	// A backend without InsertTx answers ErrNoTxEnqueue here too.
	InsertManyTx(ctx context.Context, tx shards.Tx, ps []InsertParams) ([]EnqueueResult, error)

	// Claim blocks until a job is available to worker (0 ≤ worker <
	// OpenParams.Workers), marks it running, increments its Attempt and
	// returns it. It returns ctx.Err() when ctx is done and ErrClosed after
	// Close. The row stays valid, and must not be modified by the caller,
	// until it is passed to Complete, Retry or Fail; from that call on the
	// backend may reuse it (the local backend recycles its records), so the
	// caller must not read it either.
	Claim(ctx context.Context, worker int) (*JobRow, error)

	// Complete records that the running job succeeded.
	Complete(ctx context.Context, job *JobRow) error

	// Retry records that the running job failed with errMsg and makes it
	// available again after delay.
	Retry(ctx context.Context, job *JobRow, delay time.Duration, errMsg string) error

	// Fail records that the running job failed for good with errMsg.
	Fail(ctx context.Context, job *JobRow, errMsg string) error

	// Snooze makes the running job wait again until delay has passed
	// without counting the attempt: the next Claim of it gives the same
	// Attempt as this one, and the attempt budget is not consumed.
	Snooze(ctx context.Context, job *JobRow, delay time.Duration) error

	// Stats reports the jobs per queue, for metrics and the shutdown report.
	Stats(ctx context.Context) ([]QueueStats, error)

	// Close releases the backend. Claims blocked in it return ErrClosed.
	Close(ctx context.Context) error
}

// Capabilities are the optional behaviours of a Backend.
type Capabilities struct {
	// TenantIsolation: the backend implements fair order per tenant, tenant
	// slots and lanes (Config.Tenants). A Client on a backend without it logs
	// a warning when Config.Tenants asks for isolation and runs without it.
	TenantIsolation bool
	// Periodic: the backend schedules OpenParams.Periodic. A Client with
	// periodic entries refuses a backend without it.
	Periodic bool
	// CancelRunning: Canceller.Cancel of a running job reaches the worker
	// holding it through OpenParams.Cancelled.
	CancelRunning bool
}

// OpenParams are the effective settings a Backend serves.
type OpenParams struct {
	// Workers is the number of workers that will call Claim, indexed 0..Workers-1.
	Workers int
	// Tenants is the effective tenant isolation (lanes already clamped to
	// Workers). Backends without Capabilities.TenantIsolation ignore it.
	Tenants TenantConfig
	// Kinds are the registered kinds, defaults applied; their Concurrency
	// caps apply at Claim.
	Kinds []KindSpec
	// Clock is the time source for scheduling.
	Clock Clock
	// Logger receives the backend's own diagnostics.
	Logger *slog.Logger
	// Periodic are the entries of jobs.periodic to schedule (a backend with
	// Capabilities.Periodic); Scheduled is told what each scheduling of
	// an entry did, for the metrics.
	Periodic  []PeriodicParams
	Scheduled func(name string, enqueued, skipped int)
	// Cancelled is called (from any goroutine) by a backend that can
	// cancel running jobs (Capabilities.CancelRunning) when a job this
	// Client's workers hold was cancelled: the Client cancels the job's
	// context.
	Cancelled func(id JobID)
}

// InsertParams is one job to insert.
type InsertParams struct {
	// Kind is the kind's name.
	Kind string
	// Queue is the queue it waits in.
	Queue string
	// Tenant is the enqueuing tenant, "" for none.
	Tenant string
	// EncodedArgs is the JSON encoding of the args. It is the job's
	// arguments: a backend that stores jobs stores these bytes.
	EncodedArgs []byte
	// Args is the enqueued value itself, set only when decoding EncodedArgs
	// provably gives back an equal value that shares no memory with the
	// caller's. A backend that keeps jobs in memory may hand it back in
	// JobRow.Args so the Client skips decoding; others ignore it.
	Args Args
	// MaxAttempts is the attempt budget (≥ 1).
	MaxAttempts int
	// UniqueKey is the uniqueness key, "" for a kind without UniqueBy. It is
	// scoped by Kind and Tenant: two tenants never deduplicate each other.
	UniqueKey string
	// RunAt is the earliest time the job may run; zero means now.
	RunAt time.Time
	// Priority orders the job among its tenant's waiting jobs, 1 (first)
	// to 4 (last); the Client always sets it. A backend reads 0 as 1.
	Priority int
	// TraceContext is the enqueuing span's propagated context
	// (traceparent, tracestate), nil for none: the backend stores it with
	// the job and hands it back in JobRow.TraceContext.
	TraceContext map[string]string
}

// JobRow is a claimed job as a Backend hands it to the Client.
type JobRow struct {
	// ID is the job's id.
	ID JobID
	// Kind is the kind's name.
	Kind string
	// Queue is the job's queue.
	Queue string
	// Tenant is the enqueuing tenant, "" for none.
	Tenant string
	// EncodedArgs is the JSON encoding of the args.
	EncodedArgs []byte
	// Args, when set, is InsertParams.Args of the insert; the Client uses it
	// instead of decoding EncodedArgs.
	Args Args
	// Attempt is the number of this attempt (1 for the first).
	Attempt int
	// MaxAttempts is the attempt budget.
	MaxAttempts int
	// EnqueuedAt is when the job was inserted.
	EnqueuedAt time.Time
	// TraceContext is InsertParams.TraceContext of the insert (nil for
	// none, or from a backend that does not keep it).
	TraceContext map[string]string
	// Handle belongs to the backend (for example its own record of the job);
	// the Client passes the row back untouched.
	Handle any
}

// QueueStats counts the jobs of one queue.
type QueueStats struct {
	// Queue is the queue's name.
	Queue string
	// Waiting counts jobs not running: available, scheduled for later or
	// for a retry, or held back by a kind's concurrency cap.
	Waiting int
	// Running counts claimed jobs not yet completed, retried or failed.
	Running int
}

// Clock is the time source of the runtime, injectable so tests do not sleep.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// ErrNotWaiting is the answer of Client.Cancel and CancelTx for a job that
// is not waiting: it is running, has completed or failed, or does not
// exist.
var ErrNotWaiting = errors.New("jobs: the job is not waiting")

// ErrNoCancel is the answer of Client.Cancel and CancelTx on a backend that
// is no Canceller.
var ErrNoCancel = errors.New("jobs: this job backend cannot cancel jobs")

// Canceller is the optional Backend behaviour behind Client.Cancel and
// CancelTx: a waiting job (available, scheduled for later or for a retry)
// is failed for good without running again, with "cancelled" as its last
// error. A running job is not touched. The PostgreSQL backend implements it.
type Canceller interface {
	// Cancel cancels the waiting job id of the database Insert writes to;
	// ErrNotWaiting when there is no such waiting job.
	Cancel(ctx context.Context, id JobID) error
	// CancelTx cancels the waiting job id of tx's database with tx: the
	// job stays cancelled if and only if tx commits.
	CancelTx(ctx context.Context, tx shards.Tx, id JobID) error
}

// QueuePauser is the optional Backend behaviour behind pausing a queue (the
// operator console's pause and resume). A paused queue's waiting jobs are
// not claimed until it is resumed; its running jobs finish. The pause is
// stored by the backend, so it holds for every process sharing the store
// and across restarts. The PostgreSQL backend implements it (pgjobs.DB for
// one database, the console's unit; pgjobs.Backend for all of a cell's);
// the local backend, whose jobs live in one process's memory, does not, and
// the console answers 501 for it. It stays apart from Backend because the
// console pauses per database, below any Backend.
type QueuePauser interface {
	// PauseQueue pauses queue; it reports whether the queue was running
	// before (pausing a paused queue changes nothing).
	PauseQueue(ctx context.Context, queue string) (bool, error)
	// ResumeQueue resumes queue and wakes idle workers; it reports whether
	// the queue was paused.
	ResumeQueue(ctx context.Context, queue string) (bool, error)
	// PausedQueues lists the paused queues by name.
	PausedQueues(ctx context.Context) ([]string, error)
}
