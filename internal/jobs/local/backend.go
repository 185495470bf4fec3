package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// Backend is the in-memory jobs.Backend. The zero value is not usable; call New.
//
// Its state is grouped by who touches it: the lock-free hand-offs
// (handoff.go) first, then what mu guards: the queues and their lane rings
// (queues.go), the tenants and their lines (tenants.go, lines.go), the
// workers parked for want of work (workers.go), the kinds with a
// concurrency cap (parking.go) and the jobs not yet due (delayed.go).
type Backend struct {
	// Lock-free hand-offs, so producers and finishing workers rarely touch
	// mu: a plain Insert and a Complete push the job on a stack, and
	// whoever next holds mu applies them (drain). idleWorkerCount counts
	// parked workers; a push takes mu itself only when one is parked,
	// since otherwise a busy worker's next Claim drains the stacks.
	//
	// These take the first cache line of the Backend (a large object, so
	// page-aligned), and mu with the fields every locked operation writes
	// the second: lock-free pushes on other cores then do not take the
	// lock's line away from its holder.
	inbox           stack // inserted jobs, not yet in their lines
	inboxLen        atomic.Int32
	finished        stack // completed (or failed) jobs, not yet released
	idleWorkerCount atomic.Int32
	status          atomic.Int32 // statusNew, statusOpen, statusClosed
	nextID          atomic.Int64
	_               [24]byte

	mu           sync.Mutex
	headsVisited uint64 // ring heads inspected by nextJob; the O(1) test reads it
	queues       []*queue
	freedRecords *job    // dropped records, for unlockAndRecycle to pool
	sharedTenant *tenant // jobs without a tenant, and every job when not isolated
	_            [8]byte

	// systemClock: clock is the system clock, and now reads it through
	// wallBase (see clock.go).
	systemClock bool
	wallBase    atomic.Pointer[time.Time]

	clock         jobs.Clock
	periodic      atomic.Pointer[jobs.InProcessScheduler] // set by Open with jobs.periodic entries
	isolated      bool
	maxConcurrent int // per-tenant slots (TenantConfig.MaxConcurrent), 0 = none
	// limitSrc is WithLimits' source; limits is it when it is not a
	// jobs.UniformLimits (which Open folds into maxConcurrent): read on
	// each claim and release of a tenant's job.
	limitSrc, limits jobs.TenantLimits
	numLanes         int // ≥ 1; worker i serves lane i % numLanes
	lanesPerTenant   int // shuffle-shard size; 0 unless isolated with lanes on

	workers      []*worker   // by worker index, as passed to Claim
	idleWorkers  [][]*worker // workers parked in Claim, per lane
	queuesByName map[string]*queue
	tenants      map[string]*tenant
	// tenantCache lets Insert find a job's tenant without the lock, so
	// that the drain holding it does not hash tenant ids: a cache of
	// tenants (see tenantSlots), written under mu (tenant, addIdleTenant) and
	// read by Insert. tenants stays the truth; an evicted tenant is
	// marked, and admit checks the mark, so a hint that went stale between
	// Insert and the drain is not used.
	tenantCache [tenantSlots]atomic.Pointer[tenant]
	tenantSeed  maphash.Seed
	// queuesSnapshot is a copy of queues for Insert, replaced under mu when
	// a queue is added, so that admit need not read the queue's name from
	// the job (a cache line the drain would otherwise not touch).
	queuesSnapshot atomic.Pointer[[]*queue]
	// idle tenants (no jobs), oldest first; see maxIdleTenants.
	idleTenantsHead, idleTenantsTail *tenant
	idleTenants                      int
	cappedKinds                      map[string]*cappedKind // kinds with a Concurrency cap only; read-only after Open
	byUniqueKey                      map[string]*job        // unique jobs not yet dropped, by kind, tenant and key

	// Jobs not yet due, and the one timer armed for the earliest of them.
	// timerGen tells the armed timer from replaced ones (see promoteDue).
	delayed  delayedHeap
	timer    jobs.Timer
	timerAt  time.Time
	timerGen uint64
}

// The life of a Backend: New, then Open once, then Close; status is atomic
// so that the lock-free paths (Insert, Complete) can refuse an unusable
// backend without taking mu.
const (
	statusNew int32 = iota
	statusOpen
	statusClosed
)

// Option configures a Backend at New.
type Option func(*Backend)

// WithLimits makes the backend take each tenant's slots (cap on running
// jobs) and weight from l instead of TenantConfig.MaxConcurrent, and turns
// tenant isolation on. A jobs.UniformLimits is the same cap for every
// tenant and weight 1 (isolation on only when its cap is above 0). Other
// sources are read again on each claim and on each end of one of a
// tenant's jobs, so a change applies from the tenant's next claim (a
// raised cap of a tenant at its cap: from the end of its next job).
func WithLimits(l jobs.TenantLimits) Option { return func(b *Backend) { b.limitSrc = l } }

// New returns an unopened backend.
func New(opts ...Option) *Backend {
	b := &Backend{}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Capabilities reports tenant isolation and periodic jobs, scheduled in
// this process (jobs.InProcessScheduler: every start is a first start, and
// each process schedules its own).
func (b *Backend) Capabilities() jobs.Capabilities {
	return jobs.Capabilities{TenantIsolation: true, Periodic: true}
}

// Open sets the backend up for p. It may be called once.
func (b *Backend) Open(_ context.Context, p jobs.OpenParams) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() != statusNew {
		return errors.New("local: Open called twice or after Close")
	}
	if p.Workers < 1 {
		return fmt.Errorf("local: Open: workers must be >= 1, got %d", p.Workers)
	}
	t := p.Tenants
	if t.Lanes > p.Workers || t.Lanes > jobs.MaxLanes || (t.Lanes > 0 && (t.LanesPerTenant < 1 || t.LanesPerTenant > t.Lanes)) {
		return fmt.Errorf("local: Open: invalid lanes %d / lanes per tenant %d for %d workers (pass the effective config)",
			t.Lanes, t.LanesPerTenant, p.Workers)
	}
	b.clock = p.Clock
	if b.clock == nil {
		b.clock = jobs.SystemClock{}
	}
	if _, ok := b.clock.(jobs.SystemClock); ok {
		b.systemClock = true
		t := time.Now()
		b.wallBase.Store(&t)
	}
	b.isolated = t.Isolated()
	if b.isolated {
		b.maxConcurrent = t.MaxConcurrent
	}
	switch l := b.limitSrc.(type) {
	case nil:
	case jobs.UniformLimits:
		if l.MaxRunning > 0 {
			b.isolated, b.maxConcurrent = true, l.MaxRunning
		}
	default:
		b.isolated, b.limits = true, l
	}
	b.numLanes = 1
	if b.isolated && t.Lanes > 0 {
		b.numLanes, b.lanesPerTenant = t.Lanes, t.LanesPerTenant
	}
	b.workers = make([]*worker, p.Workers)
	for i := range b.workers {
		b.workers[i] = &worker{lane: i % b.numLanes, wake: make(chan struct{}, 1)}
	}
	b.idleWorkers = make([][]*worker, b.numLanes)
	b.queuesByName = make(map[string]*queue)
	b.tenants = make(map[string]*tenant)
	b.byUniqueKey = make(map[string]*job)
	b.cappedKinds = make(map[string]*cappedKind)
	all := make([]int, b.numLanes)
	for i := range all {
		all[i] = i
	}
	b.sharedTenant = newTenant("", all)
	b.sharedTenant.shared = true
	b.tenantSeed = maphash.MakeSeed()
	for _, k := range p.Kinds {
		if k.Concurrency > 0 {
			b.cappedKinds[k.Name] = &cappedKind{limit: k.Concurrency}
		}
		b.queue(k.Queue)
	}
	b.status.Store(statusOpen)
	if len(p.Periodic) > 0 {
		log := cmp.Or(p.Logger, slog.Default())
		b.periodic.Store(jobs.StartInProcess(b.clock, p.Periodic,
			func(ip jobs.InsertParams) (jobs.EnqueueResult, error) { return b.Insert(context.Background(), ip) },
			p.Scheduled,
			func(name string, err error) {
				log.Error("local: enqueuing a periodic job failed; that period is not retried", "entry", name, "err", err)
			}))
	}
	return nil
}

// usable reports why the backend cannot take calls now, if it cannot.
func (b *Backend) usable() error {
	switch b.status.Load() {
	case statusNew:
		return errors.New("local: backend not opened")
	case statusClosed:
		return jobs.ErrClosed
	}
	return nil
}

// InsertTx answers jobs.ErrNoTxEnqueue: jobs in memory cannot join a
// database transaction.
func (b *Backend) InsertTx(context.Context, shards.Tx, jobs.InsertParams) (jobs.EnqueueResult, error) {
	return jobs.EnqueueResult{}, jobs.ErrNoTxEnqueue
}

// InsertManyTx answers jobs.ErrNoTxEnqueue, as InsertTx.
func (b *Backend) InsertManyTx(context.Context, shards.Tx, []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	return nil, jobs.ErrNoTxEnqueue
}

// InsertMany inserts the jobs one by one, in ps's order, so a tenant's
// batch keeps its order in the fair order. It stops at the first error
// (the backend closed) with the results so far: the jobs before it stay.
func (b *Backend) InsertMany(ctx context.Context, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	out := make([]jobs.EnqueueResult, 0, len(ps))
	for i := range ps {
		r, err := b.Insert(ctx, ps[i])
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Insert adds a job; see jobs.Backend. A job that is neither unique nor
// delayed is pushed on the inbox without taking the lock.
func (b *Backend) Insert(_ context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	now := b.now()
	j := b.newJob(&p, now)
	b.lookUpHints(j, &p)
	if p.UniqueKey == "" && (p.RunAt.IsZero() || !p.RunAt.After(now)) {
		id := jobs.JobID(b.nextID.Add(1))
		j.row.ID = id
		// From the push on, j may run, end and be recycled at any time:
		// do not touch it again.
		b.inbox.push(j)
		if b.inboxLen.Add(1) >= inboxBatch {
			// Apply a full batch now, so no later drain holds the lock
			// for a backlog's worth of inserts.
			b.mu.Lock()
			b.drain()
			b.unlockAndRecycle()
		} else {
			b.drainForIdleWorker()
		}
		return jobs.EnqueueResult{ID: id}, nil
	}
	if p.UniqueKey != "" {
		j.uniqueKey = p.Kind + "\x00" + p.Tenant + "\x00" + p.UniqueKey
		j.hasUniqueKey = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	b.drain() // a completion on the finished stack may free the unique key
	if j.hasUniqueKey {
		if dup := b.byUniqueKey[j.uniqueKey]; dup != nil {
			return jobs.EnqueueResult{ID: dup.row.ID, Duplicate: true}, nil
		}
		b.byUniqueKey[j.uniqueKey] = j
	}
	j.row.ID = jobs.JobID(b.nextID.Add(1))
	b.admit(j, p.RunAt, now)
	return jobs.EnqueueResult{ID: j.row.ID}, nil
}

// Claim blocks until worker can run a job; see jobs.Backend. One goroutine
// per worker index may call it at a time.
func (b *Backend) Claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if worker < 0 || worker >= len(b.workers) {
		return nil, fmt.Errorf("local: Claim: worker %d out of range [0, %d)", worker, len(b.workers))
	}
	w := b.workers[worker]
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.mu.Lock()
		if b.status.Load() == statusClosed {
			b.mu.Unlock()
			return nil, jobs.ErrClosed
		}
		b.drain()
		if j := b.nextJob(w); j != nil {
			b.unlockAndRecycle()
			// The attempt is ours from here on: nothing else reads or
			// writes these until the row comes back, so they are set
			// outside the lock (they sit in the row's cache lines, which
			// the worker is about to read anyway).
			j.ending.Store(false)
			j.row.Attempt++
			return &j.row, nil
		}
		// Announce the park before the last look at the stacks: a pusher
		// either sees idleWorkerCount > 0 and drains, or pushed before this
		// look.
		b.idleWorkerCount.Add(1)
		if !b.inbox.empty() || !b.finished.empty() {
			b.idleWorkerCount.Add(-1)
			b.mu.Unlock()
			continue
		}
		w.idle = true
		b.idleWorkers[w.lane] = append(b.idleWorkers[w.lane], w)
		b.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
			b.mu.Lock()
			if w.idle {
				b.removeIdleWorker(w)
			}
			b.mu.Unlock()
			select { // a wake that raced with ctx is of no use now
			case <-w.wake:
			default:
			}
			return nil, ctx.Err()
		}
	}
}

// Complete records success; see jobs.Backend. It does not take the lock: the
// job goes on the finished stack, and the next drain releases and drops it.
func (b *Backend) Complete(_ context.Context, row *jobs.JobRow) error {
	j, err := b.endAttempt(row)
	if err != nil {
		return err
	}
	b.finished.push(j)
	b.drainForIdleWorker()
	return nil
}

// Fail records a final failure; the job is dropped like a completed one.
func (b *Backend) Fail(ctx context.Context, row *jobs.JobRow, _ string) error {
	return b.Complete(ctx, row)
}

// Retry makes the job available again after delay.
func (b *Backend) Retry(_ context.Context, row *jobs.JobRow, delay time.Duration, _ string) error {
	j, err := b.endAttempt(row)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	b.drain()
	b.release(j)
	j.line.queue.waiting++
	if delay > 0 {
		b.delayUntil(j, b.clock.Now().Add(delay))
	} else {
		b.makeReady(j)
	}
	return nil
}

// Snooze makes the job available again after delay, its attempt not
// counted: Claim counts it again.
func (b *Backend) Snooze(ctx context.Context, row *jobs.JobRow, delay time.Duration) error {
	row.Attempt--
	if err := b.Retry(ctx, row, delay, ""); err != nil {
		row.Attempt++ // still running as that attempt
		return err
	}
	return nil
}

// Stats counts the jobs of each queue, in the order queues were first seen.
func (b *Backend) Stats(context.Context) ([]jobs.QueueStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() == statusOpen {
		b.drain()
	}
	out := make([]jobs.QueueStats, len(b.queues))
	for i, q := range b.queues {
		out[i] = jobs.QueueStats{Queue: q.name, Waiting: q.waiting, Running: q.running}
	}
	return out, nil
}

// Close stops the backend: parked Claims return jobs.ErrClosed, and the
// waiting jobs are dropped with the process.
func (b *Backend) Close(context.Context) error {
	// Before mu: a look of the scheduler in progress inserts (under mu).
	if s := b.periodic.Load(); s != nil {
		s.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Swap(statusClosed) == statusClosed {
		return nil
	}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	for l, ws := range b.idleWorkers {
		for _, w := range ws {
			w.idle = false
			b.idleWorkerCount.Add(-1)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		b.idleWorkers[l] = nil
	}
	return nil
}

// endAttempt resolves a row handed out by Claim and marks its attempt as
// ending, so that a second Complete, Retry or Fail of the same attempt is an
// error rather than a double release of its slot and capacity.
func (b *Backend) endAttempt(row *jobs.JobRow) (*job, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	j, ok := row.Handle.(*job)
	if !ok || j == nil || &j.row != row {
		return nil, errors.New("local: row was not claimed from this backend")
	}
	if !j.ending.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("local: job %d is not running", row.ID)
	}
	return j, nil
}

var _ jobs.Backend = (*Backend)(nil)
