package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/jobs"
)

// Options are a Backend's or a DB's collaborators; every field may be left
// zero.
type Options struct {
	// Name names a DB's database in logs and in List ("control" or a
	// shard's name). "" means "control". New names its databases itself.
	Name string
	// Logger receives the backend's diagnostics. nil means the Logger the
	// Client passes to Open.
	Logger *slog.Logger
	// Breaker guards plain enqueues with a circuit breaker
	// (Config.BreakerFailures, Config.BreakerCooldown). New turns it on
	// for the control database.
	Breaker bool
	// Registry receives the breaker's metrics when Breaker is set. nil
	// means they are kept but not registered (never the global registry).
	Registry *prometheus.Registry
	// Limits is the source of per-tenant caps and weights (see limits.go);
	// nil means none: no tenant is capped and every weight is 1.
	Limits jobs.TenantLimits
	// TraceContext makes claims read each job's stored trace context
	// (jobs.JobRow.TraceContext) for the job's span; off, a claim reads
	// nothing more than before. Enqueues store a trace context whenever
	// they are given one.
	TraceContext bool
}

// DB is one database's cellgate_jobs table: a Backend serves it to its
// workers, and the operator console reads and changes it (List, Operate,
// PauseQueue, ...). Build one alone with NewDB for the console's methods.
type DB struct {
	// claimSQL is sqlClaim, or sqlClaimTraced with Options.TraceContext;
	// turnsSQL is the fair claim's, sqlClaimTurns or sqlClaimTurnsTraced.
	claimSQL string
	turnsSQL string
	pool     *pgxpool.Pool
	cfg      Config
	name     string
	fair     bool
	// turns is the fair order between tenants; only the fetcher touches it.
	turns tenantTurns
	// news is what notifications told the fetcher (fair claims).
	news      news
	brk       *breaker
	claimedBy string
	optLogger *slog.Logger
	limits    jobs.TenantLimits
	lcache    limitsCache

	ready     chan struct{} // closed once the table exists
	readyOnce sync.Once

	// Set by Open, read-only afterwards.
	openCalled  atomic.Bool
	opened      atomic.Bool
	clock       jobs.Clock
	log         *slog.Logger
	capKinds    []string
	caps        []int32
	capped      map[string]bool
	maxPrefetch int
	queues      []string // of the registered kinds, reported by Stats even when empty
	waiters     []waiter
	periodic    []jobs.PeriodicParams          // scheduled by this database's leader (the control database only)
	scheduled   func(name string, enq, sk int) // OpenParams.Scheduled
	cancelled   func(id jobs.JobID)            // OpenParams.Cancelled

	quit    chan struct{} // closed by Close
	closeMu sync.Mutex
	closed  bool
	wg      sync.WaitGroup

	// Claim hand-off, guarded by mu.
	mu       sync.Mutex
	queue    []*waiter              // workers blocked in Claim, oldest first
	reserved int                    // jobs the claim in flight is for
	stash    jobStash               // claimed jobs no worker has taken yet
	returned uint64                 // Claims by workers back from a job (see landedLocked)
	prefetch int                    // jobs to keep claimed ahead of the workers (see fetch.go)
	running  map[jobs.JobID]heldJob // claimed by this backend
	// runningOf counts running per tenant (fair claims: a tenant's room
	// under its cap, as far as this process's own jobs go).
	runningOf map[string]int
	claims    uint64 // claim statements sent (for benchmarks: jobs per claim)
	claimed   uint64 // jobs they returned

	// lostClaims are the times (p_now) of claims whose answer the
	// connection lost: they may have committed. Only the fetcher goroutine
	// touches it (see releaseLost).
	lostClaims []time.Time

	demand chan struct{} // a worker started waiting
	wake   chan struct{} // there may be new work

	// Wake-ups at the run_at of jobs scheduled by this process.
	tmu     sync.Mutex
	wakeAts timeHeap
	timer   jobs.Timer
	timerAt time.Time

	// Buffered completions, guarded by cmu.
	cmu        sync.Mutex
	done       []doneRec
	written    []doneRec // committed without waiting for the WAL flush, not yet confirmed (see confirmLoop)
	doneSince  time.Time // when the buffer's oldest completion was added
	doneClosed bool      // Close has written the buffer; write each completion at once
	flushKick  chan struct{}
	flushFull  chan struct{}

	insCh chan *insertReq
	ntf   notifier
	// Plain-enqueue statements the inserter sent and the jobs they wrote
	// (for benchmarks: jobs per insert).
	inserts, insertedJobs atomic.Uint64

	// The maintenance connection's loop.
	lastAnalyze  time.Time // of the table, by this backend's vacuum check
	leader       atomic.Bool
	mmu          sync.Mutex
	mreqs        []chan MaintenanceReport
	periodicKick bool // a periodic entry came due (kickPeriodic), under mmu
	waitCancel   context.CancelFunc
	// tableOID is the oid of this backend's jobs table, read by the
	// maintenance connection before it listens: the cancellations it
	// hears name their table (parseCancel).
	tableOID atomic.Uint32

	logs logLimiter
}

// waiter is one worker blocked in Claim. Its channel has room for the one
// row the fetcher hands it, sent under mu.
type waiter struct {
	ch     chan *jobs.JobRow
	queued bool
	called bool // Claim was called before: the worker comes back from a job
}

// heldJob is a job this backend claimed and has not finished or handed
// back.
type heldJob struct {
	attempt int32
	tenant  string
}

// holdLocked records a claimed job. b.mu must be held.
func (b *DB) holdLocked(r *jobs.JobRow) {
	b.running[r.ID] = heldJob{attempt: int32(r.Attempt), tenant: r.Tenant}
	b.runningOf[r.Tenant]++
}

// dropLocked forgets a job finished or handed back. b.mu must be held.
// It reports whether, with fair claims, the job's tenant has a cap: the
// turns may pass the tenant over (at its cap here, or resting), and a
// claim that found nothing else sleeps until news, so the caller wakes
// the fetcher, once the job's outcome is buffered or written. Before
// that, a claim would still count the job as running, find the tenant
// without room and pass it over again.
func (b *DB) dropLocked(id jobs.JobID) (freed bool) {
	h, ok := b.running[id]
	if !ok {
		return false
	}
	delete(b.running, id)
	n := b.runningOf[h.tenant] - 1
	if n <= 0 {
		delete(b.runningOf, h.tenant)
	} else {
		b.runningOf[h.tenant] = n
	}
	return b.fair && b.limitsOf(h.tenant).maxRunning > 0
}

type doneRec struct {
	id      int64
	attempt int32
}

// NewDB returns a DB over pool, whose database must already have the job
// backend's migrations applied (Migrate). It validates cfg.
func NewDB(pool *pgxpool.Pool, cfg Config, o Options) (*DB, error) {
	b, err := newTableDB(pool, cfg, o)
	if err != nil {
		return nil, err
	}
	b.markReady()
	return b, nil
}

// newTableDB returns a DB whose table may not exist yet: claims,
// maintenance and in-transaction enqueues wait for markReady.
func newTableDB(pool *pgxpool.Pool, cfg Config, o Options) (*DB, error) {
	if pool == nil {
		return nil, errors.New("pgjobs: New: nil pool")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	name := o.Name
	if name == "" {
		name = "control"
	}
	host, _ := os.Hostname()
	b := &DB{
		pool:      pool,
		cfg:       cfg,
		name:      name,
		fair:      cfg.Claim == ClaimFair,
		claimedBy: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), name),
		optLogger: o.Logger,
		limits:    o.Limits,
		claimSQL:  sqlClaim,
		turnsSQL:  sqlClaimTurns,
		ready:     make(chan struct{}),
		clock:     jobs.SystemClock{},
		quit:      make(chan struct{}),
		running:   make(map[jobs.JobID]heldJob),
		runningOf: make(map[string]int),
		demand:    make(chan struct{}, 1),
		wake:      make(chan struct{}, 1),
		flushKick: make(chan struct{}, 1),
		flushFull: make(chan struct{}, 1),
		insCh:     make(chan *insertReq),
		ntf:       notifier{kick: make(chan struct{}, 1)},
	}
	if o.TraceContext {
		b.claimSQL, b.turnsSQL = sqlClaimTraced, sqlClaimTurnsTraced
	}
	if o.Breaker {
		b.brk = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, b.now)
		if o.Registry != nil {
			if err := b.brk.register(o.Registry); err != nil {
				return nil, fmt.Errorf("pgjobs: register breaker metrics: %w", err)
			}
		}
	}
	return b, nil
}

func (b *DB) markReady() { b.readyOnce.Do(func() { close(b.ready) }) }

// Ready reports whether the database's jobs table exists (always true for
// a DB from NewDB).
func (b *DB) Ready() bool {
	select {
	case <-b.ready:
		return true
	default:
		return false
	}
}

// Name is the database's name in logs and listings.
func (b *DB) Name() string { return b.name }

// IsLeader reports whether this backend currently runs its database's
// maintenance (holds the table's advisory lock).
func (b *DB) IsLeader() bool { return b.leader.Load() }

// BreakerState reports the enqueue breaker: 0 closed, 1 half-open, 2 open;
// always 0 without a breaker.
func (b *DB) BreakerState() int {
	if b.brk == nil {
		return breakerClosed
	}
	return b.brk.current()
}

func (b *DB) now() time.Time { return b.clock.Now() }

// open prepares the backend for p and starts its goroutines. It may be
// called once.
func (b *DB) open(_ context.Context, p jobs.OpenParams) error {
	if p.Workers < 1 {
		return fmt.Errorf("pgjobs: Open: workers must be >= 1, got %d", p.Workers)
	}
	if !b.openCalled.CompareAndSwap(false, true) {
		return errors.New("pgjobs: Open called twice")
	}
	if p.Clock != nil {
		b.clock = p.Clock
	}
	b.log = b.optLogger
	if b.log == nil {
		b.log = p.Logger
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.log = b.log.With("jobs_db", b.name)
	b.periodic, b.scheduled, b.cancelled = p.Periodic, p.Scheduled, p.Cancelled
	b.capped = make(map[string]bool)
	seen := map[string]bool{}
	for _, k := range p.Kinds {
		if k.Concurrency > 0 {
			b.capKinds = append(b.capKinds, k.Name)
			b.caps = append(b.caps, int32(k.Concurrency))
			b.capped[k.Name] = true
		}
		q := k.Queue
		if q == "" {
			q = jobs.DefaultQueue
		}
		if !seen[q] {
			seen[q] = true
			b.queues = append(b.queues, q)
		}
	}
	if b.capKinds == nil {
		b.capKinds, b.caps = []string{}, []int32{}
	}
	b.waiters = make([]waiter, p.Workers)
	for i := range b.waiters {
		b.waiters[i].ch = make(chan *jobs.JobRow, 1)
	}
	switch b.cfg.Prefetch {
	case 0:
		b.maxPrefetch = p.Workers
	case PrefetchOff:
		b.maxPrefetch = 0
	default:
		b.maxPrefetch = b.cfg.Prefetch
	}
	b.wg.Add(5 + b.cfg.Inserters)
	if b.limits != nil {
		b.wg.Add(1)
		go b.limitsLoop()
	}
	go b.notifyLoop()
	go b.fetchLoop()
	go b.flushLoop()
	go b.confirmLoop()
	go b.connLoop()
	for range b.cfg.Inserters {
		go b.insertLoop()
	}
	b.opened.Store(true) // last: usable() then sees every field above
	return nil
}

// usable reports why the backend cannot serve a call, if it cannot.
func (b *DB) usable() error {
	if !b.opened.Load() {
		return errors.New("pgjobs: backend not opened")
	}
	select {
	case <-b.quit:
		return jobs.ErrClosed
	default:
		return nil
	}
}

func (b *DB) isClosed() bool {
	select {
	case <-b.quit:
		return true
	default:
		return false
	}
}

// close stops the backend's goroutines, writes the buffered completions and
// hands back the jobs it claimed but gave to no worker. Claims blocked in it
// return jobs.ErrClosed. Jobs still running stay 'running' and are rescued
// by the maintenance leader once their heartbeats are older than
// RescueAfter (or completed if their worker reports before then: the
// outcome of a job that finishes after Close is still written).
func (b *DB) close(ctx context.Context) error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	b.closeMu.Unlock()
	b.mu.Lock()
	close(b.quit)
	b.mu.Unlock()
	b.mmu.Lock()
	if b.waitCancel != nil {
		b.waitCancel()
	}
	b.mmu.Unlock()
	b.tmu.Lock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.tmu.Unlock()
	if !b.opened.Load() {
		return nil
	}
	stopped := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		return fmt.Errorf("pgjobs: close %s: %w", b.name, ctx.Err())
	}
	var errs []error
	if err := b.closeDone(ctx); err != nil {
		errs = append(errs, fmt.Errorf("pgjobs: close %s: write completions (those jobs will be rescued and run again; their ids are logged): %w", b.name, err))
	}
	b.mu.Lock()
	stash := b.stash.drain()
	b.mu.Unlock()
	if err := b.release(ctx, stash); err != nil {
		errs = append(errs, fmt.Errorf("pgjobs: close %s: hand back unstarted jobs: %w", b.name, err))
	}
	// The fetcher has stopped: the jobs of a claim whose answer it lost
	// are handed back here, or they would wait for their rescue.
	if err := b.releaseLost(ctx); err != nil {
		errs = append(errs, fmt.Errorf("pgjobs: close %s: %w", b.name, err))
	}
	return errors.Join(errs...)
}

// Stats counts the waiting and running jobs per queue in the table (all
// processes), after writing this backend's buffered completions. Queues of
// the registered kinds are reported even when empty.
func (b *DB) Stats(ctx context.Context) ([]jobs.QueueStats, error) {
	if !b.Ready() {
		return b.emptyStats(), nil
	}
	if err := b.flushDone(ctx); err != nil {
		return nil, err
	}
	rows, err := b.pool.Query(ctx, sqlStats, pgx.QueryExecModeExec)
	if err != nil {
		return nil, fmt.Errorf("pgjobs: stats of %s: %w", b.name, err)
	}
	byQueue := map[string]*jobs.QueueStats{}
	var out []jobs.QueueStats
	for rows.Next() {
		var s jobs.QueueStats
		if err := rows.Scan(&s.Queue, &s.Waiting, &s.Running); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgjobs: stats of %s: %w", b.name, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgjobs: stats of %s: %w", b.name, err)
	}
	for i := range out {
		byQueue[out[i].Queue] = &out[i]
	}
	for _, q := range b.queues {
		if byQueue[q] == nil {
			out = append(out, jobs.QueueStats{Queue: q})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}

func (b *DB) emptyStats() []jobs.QueueStats {
	out := make([]jobs.QueueStats, len(b.queues))
	for i, q := range b.queues {
		out[i] = jobs.QueueStats{Queue: q}
	}
	return out
}

// sqlStats counts through the partial indexes of the two active states
// (the waiting jobs through two: the FIFO index leaves out held jobs), so
// its cost follows the active jobs, not the finished ones kept for
// retention.
const sqlStats = `
SELECT queue, sum(w)::int, sum(r)::int
FROM (SELECT queue, 1 AS w, 0 AS r FROM cellgate_jobs WHERE state = 'available' AND queue IS NOT NULL AND NOT held
      UNION ALL
      SELECT queue, 1, 0 FROM cellgate_jobs WHERE state = 'available' AND held
      UNION ALL
      SELECT queue, 0, 1 FROM cellgate_jobs WHERE state = 'running' AND attempt > 0) s
GROUP BY queue`

// signal does a non-blocking send on a capacity-1 channel: the receiver sees
// at least one signal after the last of any number of sends.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// logLimiter lets an error through once per logEvery per key, so a database
// that is down does not flood the log.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	skip map[string]int
}

const logEvery = 30 * time.Second

func (l *logLimiter) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.skip = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < logEvery {
		l.skip[key]++
		return false, 0
	}
	l.last[key] = now
	n := l.skip[key]
	l.skip[key] = 0
	return true, n
}

func (b *DB) logErr(key, msg string, err error) {
	if ok, skipped := b.logs.allow(key); ok {
		b.log.Error(msg, "err", err, "suppressed_since_last", skipped)
	}
}

// timeHeap is a min-heap of wake-up times.
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
