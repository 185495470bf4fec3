package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
	"github.com/prometheus/client_golang/prometheus"
)

// Options are the Client's collaborators; every field may be left zero.
type Options struct {
	// Logger receives warnings (clamped lanes, failed jobs, shutdown
	// report). nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the job metrics. nil means the metrics are kept but
	// not registered anywhere (never the global registry).
	Registry *prometheus.Registry
	// Clock is the time source for the backend's scheduling. nil means
	// SystemClock.
	Clock Clock
	// Middleware wraps every worker call, Middleware[0] outermost (see
	// Middleware). None means the handlers are called directly.
	Middleware []Middleware
	// InsertMiddleware wraps every enqueue, InsertMiddleware[0] outermost
	// (see InsertMiddleware).
	InsertMiddleware []InsertMiddleware
}

// StopReport says what Stop left behind.
type StopReport struct {
	// Abandoned are the jobs still running at the deadline: their contexts
	// were cancelled and Stop did not wait for them. With the local backend
	// they are lost with the process; a PostgreSQL backend's maintenance
	// rescues them.
	Abandoned []JobID
	// Waiting is the number of jobs that were waiting in the backend when it
	// closed (local backend: lost with the process).
	Waiting int
}

// PanicError is the failure recorded when a handler panics; the attempt is
// retried like any other failure.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Client enqueues jobs and, once started, runs them on Config.Workers
// goroutines. See the package doc for its concurrency contract.
type Client struct {
	cfg     Config // effective
	backend Backend
	kinds   map[string]*registered
	unknown int // kind index of unregistered kinds (after the registered ones)
	logger  *slog.Logger
	m       *metrics
	lanes   int // ≥ 1: lane labels of the busy-workers gauge
	ws      []workerState

	// closing rejects Enqueue once Stop begins. hardStop is set just
	// before in-flight jobs are abandoned (see loop).
	closing  atomic.Bool
	hardStop atomic.Bool

	mu        sync.Mutex // guards the lifecycle fields below
	started   bool
	stopped   bool
	report    StopReport
	stopErr   error
	claimCtx  context.Context
	cancelClm context.CancelFunc
	workCtx   context.Context
	cancelWrk context.CancelFunc
	// reportCtx carries outcomes to the backend; it is never cancelled, so
	// a PostgreSQL backend still records jobs that end during a hard stop.
	reportCtx context.Context
	done      chan struct{}

	insert InsertFunc // the insert middleware chain; nil without middleware

	// Cancellation of running jobs (Capabilities.CancelRunning): ids the
	// backend reported cancelled that no worker was seen holding yet
	// (claimed ahead, say). npending lets the workers skip the map while
	// it is empty, which is nearly always.
	cancelRunning bool
	cmu           sync.Mutex
	cpending      map[JobID]struct{}
	npending      atomic.Int32
}

// workerState is one worker's state, read by Stop and by metric scrapes
// (see folder), padded so workers updating their own slot do not share a
// cache line.
type workerState struct {
	current atomic.Int64 // id of the job being run or reported, 0 when idle
	counts  []kindCounts // by kind index, written by this worker only
	// The last kind run, to skip the map lookup for runs of one kind.
	lastKind string
	lastReg  *registered
	// With a backend that cancels running jobs: the worker's context and
	// its cancel, renewed (under mu) once a cancelled job is over, so a
	// job costs no context of its own. mu orders a cancel against the
	// worker leaving its job (see Client.cancelled).
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	_      [128 - 8 - 24 - 16 - 8 - 8 - 16 - 8]byte
}

// cancelledError is the cause of a worker's context cancelled because its
// job was cancelled (Client.Cancel of a running job).
type cancelledError struct{ id JobID }

func (e *cancelledError) Error() string { return fmt.Sprintf("jobs: job %d was cancelled", e.id) }

// Is makes a cancelled job's context cause match ErrJobCancelled.
func (e *cancelledError) Is(target error) bool { return target == ErrJobCancelled }

// ErrJobCancelled matches (errors.Is) the cause of a running job's context
// cancelled by Client.Cancel: context.Cause(ctx) tells a cancellation from
// the kind's timeout or a shutdown.
var ErrJobCancelled = errors.New("jobs: the job was cancelled")

// NewClient validates cfg, opens b with the effective settings and returns a
// Client that can Enqueue at once and runs jobs after Start. w may be nil for
// a client that only enqueues. The Client owns b from now on and closes it in
// Stop.
func NewClient(ctx context.Context, cfg Config, b Backend, w *Workers, o Options) (*Client, error) {
	if b == nil {
		return nil, errors.New("jobs: NewClient: nil backend")
	}
	logger := cmp.Or(o.Logger, slog.Default())
	clock := o.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	eff, warnings, err := cfg.Effective()
	if err != nil {
		return nil, err
	}
	for _, msg := range warnings {
		logger.Warn(msg)
	}
	if eff.Tenants.Isolated() && !b.Capabilities().TenantIsolation {
		// The PostgreSQL backend's caps and weights come from the limits it
		// was built with (cmd/server passes jobs.tenants.max_concurrent).
		logger.Warn("jobs.tenants: this job backend has no tenant isolation of its own: lanes are off, and per-tenant caps apply only through the TenantLimits it was built with")
	}
	if w == nil {
		w = NewWorkers()
	}
	w.used = true

	c := &Client{
		cfg:     eff,
		backend: b,
		kinds:   make(map[string]*registered, len(w.kinds)),
		logger:  logger,
		m:       newMetrics(b, logger),
		lanes:   max(eff.Tenants.Lanes, 1),
		ws:      make([]workerState, eff.Workers),
		done:    make(chan struct{}),
	}
	c.insert = c.chainInsert(o.InsertMiddleware)
	kms := make([]kindMetrics, 0, len(w.kinds)+1)
	for name, r := range w.kinds {
		r2 := *r // the registry may back several clients; counters are per client
		r2.idx = len(kms)
		r2.run = handlerFunc(chainWork(WorkFunc(r.run), o.Middleware))
		kms = append(kms, c.m.forKind(name))
		c.kinds[name] = &r2
	}
	c.unknown = len(kms)
	kms = append(kms, c.m.forKind(unknownKind))
	for i := range c.ws {
		c.ws[i].counts = make([]kindCounts, len(kms))
	}
	c.m.folder = newFolder(c.m, c.ws, c.lanes, kms)
	periodic, err := c.periodicParams(eff.Periodic)
	if err != nil {
		return nil, err
	}
	caps := b.Capabilities()
	if len(periodic) > 0 && !caps.Periodic {
		return nil, errors.New("jobs.periodic: this job backend does not schedule periodic jobs")
	}
	for _, p := range periodic {
		c.m.forPeriodic(p.Name)
	}
	c.cancelRunning = caps.CancelRunning
	if o.Registry != nil {
		if err := c.m.register(o.Registry); err != nil {
			return nil, fmt.Errorf("jobs: register metrics: %w", err)
		}
	}
	err = b.Open(ctx, OpenParams{
		Workers: eff.Workers,
		Tenants: eff.Tenants,
		Kinds:   w.Kinds(),
		Clock:   clock,
		Logger:  logger,

		Periodic:  periodic,
		Scheduled: c.m.scheduled,
		Cancelled: c.cancelled,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: open backend: %w", err)
	}
	return c, nil
}

// Config returns the effective configuration (defaults applied, lanes clamped).
func (c *Client) Config() Config { return c.cfg }

// WorkerJobs appends to dst the job each worker runs now, in worker order
// (0 for an idle worker), and returns it. It reads the state each worker
// already keeps in its own padded slot for Stop and the metrics: an operator
// view costs the workers nothing.
func (c *Client) WorkerJobs(dst []JobID) []JobID {
	for i := range c.ws {
		dst = append(dst, JobID(c.ws[i].current.Load()))
	}
	return dst
}

// Completed returns how many job attempts this Client's workers completed
// since it was made: the sum the completed-jobs counter folds, read from
// each worker's own counts.
func (c *Client) Completed() uint64 {
	var n uint64
	for i := range c.ws {
		for k := range c.ws[i].counts {
			n += c.ws[i].counts[k].n[outcomeCompleted].Load()
		}
	}
	return n
}

// Enqueuer is how application code adds jobs: on their own (committed at
// once) or inside a transaction of one of the cell's databases, so the job
// exists if and only if that transaction commits. *Client implements it;
// with the PostgreSQL backend (pgjobs.Backend) the job goes to the
// transaction's database. Handlers depend on this interface only.
type Enqueuer interface {
	// Enqueue commits a job of args' kind; see Client.Enqueue.
	Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (EnqueueResult, error)
	// EnqueueTx writes a job of args' kind with tx; see Client.EnqueueTx.
	EnqueueTx(ctx context.Context, tx shards.Tx, args Args, opts ...EnqueueOption) (EnqueueResult, error)
	// EnqueueMany commits one job per element of args; see
	// Client.EnqueueMany.
	EnqueueMany(ctx context.Context, args []Args, opts ...EnqueueOption) ([]EnqueueResult, error)
	// EnqueueManyTx writes one job per element of args with tx; see
	// Client.EnqueueManyTx.
	EnqueueManyTx(ctx context.Context, tx shards.Tx, args []Args, opts ...EnqueueOption) ([]EnqueueResult, error)
}

var _ Enqueuer = (*Client)(nil)

// Enqueue inserts a job of args' kind. Its tenant is the tenant carried by ctx
// (tenant.From), or none; WithoutTenant forces none. For a kind with UniqueBy,
// an enqueue while a job with the same kind, tenant and UniqueKey is active
// inserts nothing and returns that job with Duplicate set. Enqueue works
// before Start; it returns ErrClosed once Stop has begun.
func (c *Client) Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (EnqueueResult, error) {
	var p InsertParams
	if err := c.insertParams(ctx, "Enqueue", args, opts, &p); err != nil {
		return EnqueueResult{}, err
	}
	if c.insert != nil {
		return c.insertOne(ctx, nil, p)
	}
	return c.backend.Insert(ctx, p)
}

// EnqueueTx is Enqueue written with the caller's transaction tx: the job
// exists if and only if tx commits, so a data write and the job it implies
// cannot part. The PostgreSQL backend writes the job to tx's database; the
// local backend answers ErrNoTxEnqueue.
func (c *Client) EnqueueTx(ctx context.Context, tx shards.Tx, args Args, opts ...EnqueueOption) (EnqueueResult, error) {
	var p InsertParams
	if err := c.insertParams(ctx, "EnqueueTx", args, opts, &p); err != nil {
		return EnqueueResult{}, err
	}
	if c.insert != nil {
		return c.insertOne(ctx, &tx, p)
	}
	return c.backend.InsertTx(ctx, tx, p)
}

// EnqueueMany is Enqueue for every element of args, with the same ctx (so
// the same tenant) and opts for all: it returns one result per element, in
// args's order. Every element is validated and encoded before anything is
// inserted. The PostgreSQL backend inserts the jobs with one round trip
// and one commit, all or none, and keeps their order in the tenant's fair
// order; duplicates (UniqueBy) of an active job or of an earlier element
// report Duplicate. The local backend inserts them one by one (in memory,
// nothing can fail half-way but a Stop).
func (c *Client) EnqueueMany(ctx context.Context, args []Args, opts ...EnqueueOption) ([]EnqueueResult, error) {
	ps, err := c.manyParams(ctx, "EnqueueMany", args, opts)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	if c.insert != nil {
		return c.insertMany(ctx, nil, ps)
	}
	return c.backend.InsertMany(ctx, ps)
}

// EnqueueManyTx is EnqueueMany written with the caller's transaction tx:
// the jobs exist if and only if tx commits, at the cost of one round trip
// on the PostgreSQL backend. The local backend answers ErrNoTxEnqueue.
func (c *Client) EnqueueManyTx(ctx context.Context, tx shards.Tx, args []Args, opts ...EnqueueOption) ([]EnqueueResult, error) {
	ps, err := c.manyParams(ctx, "EnqueueManyTx", args, opts)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	if c.insert != nil {
		return c.insertMany(ctx, &tx, ps)
	}
	return c.backend.InsertManyTx(ctx, tx, ps)
}

// Cancel cancels the job id (one Enqueue or EnqueueMany made). A waiting
// job will not run, and ends failed with "cancelled" as its error. A
// running job (on a backend with Capabilities.CancelRunning, in any
// process) has its context cancelled, with a cause that errors.As finds as
// the job's cancellation; when its handler returns with an error it ends
// failed with "cancelled", not retried (a handler that finishes its work
// anyway and returns nil completes it). It returns an error wrapping
// ErrNotWaiting when the job has ended or does not exist (or is running,
// on a backend that cannot cancel running jobs), and ErrNoCancel on a
// backend that is no Canceller (the local one).
func (c *Client) Cancel(ctx context.Context, id JobID) error {
	cb, ok := c.backend.(Canceller)
	if !ok {
		return ErrNoCancel
	}
	return cb.Cancel(ctx, id)
}

// CancelTx is Cancel written with the caller's transaction tx, on tx's
// database (where EnqueueTx with such a tx put the job): the job stays
// cancelled if and only if tx commits.
func (c *Client) CancelTx(ctx context.Context, tx shards.Tx, id JobID) error {
	cb, ok := c.backend.(Canceller)
	if !ok {
		return ErrNoCancel
	}
	return cb.CancelTx(ctx, tx, id)
}

// manyParams validates and encodes every element of args.
func (c *Client) manyParams(ctx context.Context, op string, args []Args, opts []EnqueueOption) ([]InsertParams, error) {
	ps := make([]InsertParams, len(args))
	for i, a := range args {
		if err := c.insertParams(ctx, op, a, opts, &ps[i]); err != nil {
			return nil, fmt.Errorf("%w (element %d)", err, i)
		}
	}
	return ps, nil
}

// insertParams validates and encodes one enqueue into p; op names the
// caller in errors. p is the caller's, so the hot path copies no params.
func (c *Client) insertParams(ctx context.Context, op string, args Args, opts []EnqueueOption, p *InsertParams) error {
	if c.closing.Load() {
		return ErrClosed
	}
	if args == nil {
		return errors.New("jobs: " + op + ": nil args")
	}
	spec := args.JobSpec()
	if err := spec.Validate(); err != nil {
		return err
	}
	spec = spec.withDefaults()
	*p = InsertParams{Kind: spec.Name, Queue: spec.Queue, MaxAttempts: spec.MaxAttempts, Priority: spec.Priority}
	var o enqueueOptions
	if len(opts) > 0 {
		o = applyEnqueueOptions(opts)
		p.RunAt = o.runAt
		if o.priority != 0 {
			if o.priority < PriorityHighest || o.priority > PriorityLowest {
				return fmt.Errorf("jobs: %s(%s): WithPriority: priority must be 1..%d, got %d", op, spec.Name, PriorityLowest, o.priority)
			}
			p.Priority = o.priority
		}
	}
	if !o.noTenant {
		p.Tenant, _ = tenant.From(ctx)
	}
	if len(spec.UniqueBy) > 0 {
		u, ok := args.(UniqueArgs)
		if !ok {
			return fmt.Errorf("jobs: %s(%s): spec has unique_by but %T does not implement UniqueArgs", op, spec.Name, args)
		}
		p.UniqueKey = u.UniqueKey()
	}
	enc, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("jobs: %s(%s): encode args: %w", op, spec.Name, err)
	}
	p.EncodedArgs = enc
	if r := c.kinds[spec.Name]; r != nil && r.plain && handOver(enc) {
		p.Args = args
	}
	return nil
}

func applyEnqueueOptions(opts []EnqueueOption) enqueueOptions {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Start launches the workers. ctx provides values only (its cancellation
// does not stop the workers: Stop does, so shutdown stays graceful).
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrClosed
	}
	if c.started {
		return errors.New("jobs: Start called twice")
	}
	c.started = true
	base := context.WithoutCancel(ctx)
	c.claimCtx, c.cancelClm = context.WithCancel(base)
	c.workCtx, c.cancelWrk = context.WithCancel(base)
	c.reportCtx = base
	if c.cancelRunning {
		for i := range c.ws {
			c.ws[i].ctx, c.ws[i].cancel = context.WithCancelCause(c.workCtx)
		}
	}
	var wg sync.WaitGroup
	for i := range c.ws {
		wg.Go(func() { c.loop(i) })
	}
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return nil
}

// Stop shuts down gracefully: it stops claiming jobs, waits for the running
// ones until ctx is done or Config.ShutdownTimeout elapses, then cancels the
// contexts of those still running and reports them as abandoned without
// waiting further. It then closes the backend. Stop is idempotent; later calls
// return the first report.
func (c *Client) Stop(ctx context.Context) (StopReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.report, c.stopErr
	}
	c.stopped = true
	c.closing.Store(true)
	var rep StopReport
	if c.started {
		c.cancelClm()
		dctx, cancel := context.WithTimeout(ctx, c.cfg.ShutdownTimeout)
		select {
		case <-c.done:
		case <-dctx.Done():
			// Workers that claim from here on see hardStop and drop their job
			// (see loop), so a job is either reported here or never started.
			c.hardStop.Store(true)
			for i := range c.ws {
				if id := c.ws[i].current.Load(); id != 0 {
					rep.Abandoned = append(rep.Abandoned, JobID(id))
				}
			}
		}
		cancel()
		c.cancelWrk()
	}
	bctx := context.WithoutCancel(ctx)
	var errs []error
	if stats, err := c.backend.Stats(bctx); err != nil {
		errs = append(errs, fmt.Errorf("jobs: stats at stop: %w", err))
	} else {
		for _, s := range stats {
			rep.Waiting += s.Waiting
		}
	}
	if err := c.backend.Close(bctx); err != nil {
		errs = append(errs, fmt.Errorf("jobs: close backend: %w", err))
	}
	c.report, c.stopErr = rep, errors.Join(errs...)
	if len(rep.Abandoned) > 0 {
		c.logger.Warn("jobs: stopped with jobs still running; their contexts are cancelled",
			"abandoned", rep.Abandoned, "waiting", rep.Waiting)
	} else {
		c.logger.Info("jobs: stopped", "waiting", rep.Waiting)
	}
	return c.report, c.stopErr
}

// claimRetryDelay is the pause after a failed Claim (a database hiccup), so a
// broken backend does not spin a core.
const claimRetryDelay = 100 * time.Millisecond

// loop is worker i: claim, run, report, until Stop.
func (c *Client) loop(i int) {
	w := &c.ws[i]
	for c.claimCtx.Err() == nil {
		row, err := c.backend.Claim(c.claimCtx, i)
		if err != nil {
			if c.claimCtx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			c.logger.Error("jobs: claim failed", "worker", i, "err", err)
			select {
			case <-c.claimCtx.Done():
				return
			case <-time.After(claimRetryDelay):
			}
			continue
		}
		w.current.Store(int64(row.ID))
		if c.hardStop.Load() {
			// Stop has already listed the abandoned jobs: hand this one
			// back unrun rather than start it with a cancelled context.
			w.current.Store(0)
			_ = c.backend.Retry(c.reportCtx, row, 0, "client stopped before the job started")
			return
		}
		if !c.cancelRunning {
			c.process(w, row)
			w.current.Store(0)
			continue
		}
		id := row.ID
		if c.npending.Load() > 0 && c.takePending(id) {
			// Cancelled before this worker took it: it does not start.
			c.endCancelled(w, row)
		} else {
			c.process(w, row)
		}
		w.mu.Lock()
		w.current.Store(0)
		if w.ctx.Err() != nil {
			w.ctx, w.cancel = context.WithCancelCause(c.workCtx)
		}
		w.mu.Unlock()
		if c.npending.Load() > 0 {
			c.takePending(id) // a cancel that came after the job ended
		}
	}
}

// cancelled is OpenParams.Cancelled: job id, which this Client's backend
// holds, was cancelled. The worker running it has its context cancelled;
// if none is (yet), the id waits in cpending for the worker that takes
// the job. The id is recorded before the workers are read, so a worker
// taking the job meanwhile either is seen here or sees the id.
func (c *Client) cancelled(id JobID) {
	c.cmu.Lock()
	if c.cpending == nil {
		c.cpending = make(map[JobID]struct{})
	}
	if _, ok := c.cpending[id]; !ok {
		c.cpending[id] = struct{}{}
		c.npending.Add(1)
	}
	c.cmu.Unlock()
	for i := range c.ws {
		w := &c.ws[i]
		if w.current.Load() != int64(id) {
			continue
		}
		w.mu.Lock()
		if w.current.Load() == int64(id) && w.cancel != nil && c.takePending(id) {
			w.cancel(&cancelledError{id: id})
		}
		w.mu.Unlock()
	}
}

// takePending removes id from cpending; it reports whether it was there.
func (c *Client) takePending(id JobID) bool {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if _, ok := c.cpending[id]; !ok {
		return false
	}
	delete(c.cpending, id)
	c.npending.Add(-1)
	return true
}

// isCancelled reports whether ctx (a worker's) was cancelled for job id.
func isCancelled(ctx context.Context, id JobID) bool {
	var ce *cancelledError
	return errors.As(context.Cause(ctx), &ce) && ce.id == id
}

// endCancelled records a cancelled job as failed for good.
func (c *Client) endCancelled(w *workerState, row *JobRow) {
	r := c.kinds[row.Kind]
	counts := &w.counts[c.unknown]
	if r != nil {
		counts = &w.counts[r.idx]
	}
	counts.inc(outcomeFailed)
	id := row.ID
	if err := c.backend.Fail(c.reportCtx, row, errCancelledMsg); err != nil {
		c.reportErr(err, id)
	}
}

// errCancelledMsg is the recorded error of a cancelled job, as the
// backends record it for a waiting one.
const errCancelledMsg = "cancelled"

// process runs one attempt and reports its outcome to the backend. The
// running and lane gauges follow w.current, and the outcome is counted in w
// (see folder).
func (c *Client) process(w *workerState, row *JobRow) {
	r := w.lastReg
	if r == nil || row.Kind != w.lastKind {
		if r = c.kinds[row.Kind]; r != nil {
			w.lastKind, w.lastReg = row.Kind, r
		}
	}
	counts := &w.counts[c.unknown]
	if r != nil {
		counts = &w.counts[r.idx]
	}
	base := c.workCtx
	if c.cancelRunning {
		base = w.ctx
	}
	err := c.execute(base, r, row)

	// The backend may reuse row once it has the outcome: read it first.
	ctx := c.reportCtx
	id, kind, attempt := row.ID, row.Kind, row.Attempt
	if err != nil && c.cancelRunning && isCancelled(base, id) {
		counts.inc(outcomeFailed)
		c.logger.Info("jobs: running job cancelled", "id", id, "kind", kind, "attempt", attempt, "err", err)
		if rerr := c.backend.Fail(ctx, row, errCancelledMsg); rerr != nil {
			c.reportErr(rerr, id)
		}
		return
	}
	if err == nil {
		counts.inc(outcomeCompleted)
		if rerr := c.backend.Complete(ctx, row); rerr != nil {
			c.reportErr(rerr, id)
		}
		return
	}
	if d, ok := snoozed(err); ok {
		counts.inc(outcomeSnoozed)
		if rerr := c.backend.Snooze(ctx, row, max(d, 0)); rerr != nil {
			c.reportErr(rerr, id)
		}
		return
	}
	if IsPermanent(err) || attempt >= row.MaxAttempts {
		counts.inc(outcomeFailed)
		c.logger.Error("jobs: job failed for good", "id", id, "kind", kind, "attempt", attempt, "err", err)
		if rerr := c.backend.Fail(ctx, row, err.Error()); rerr != nil {
			c.reportErr(rerr, id)
		}
		return
	}
	delay := c.cfg.Backoff(attempt, rand.Float64())
	counts.inc(outcomeRetried)
	c.logger.Warn("jobs: job failed, will retry", "id", id, "kind", kind, "attempt", attempt, "retry_in", delay, "err", err)
	if rerr := c.backend.Retry(ctx, row, delay, err.Error()); rerr != nil {
		c.reportErr(rerr, id)
	}
}

func (c *Client) reportErr(err error, id JobID) {
	if errors.Is(err, ErrClosed) {
		return // a job finishing after a hard stop
	}
	c.logger.Error("jobs: recording a job's outcome failed", "id", id, "err", err)
}

// errTimeout is the cancellation cause of a kind's timeout.
var errTimeout = errors.New("jobs: job timed out")

// execute runs the handler with the job's tenant, the kind's timeout and
// panic recovery.
func (c *Client) execute(base context.Context, r *registered, row *JobRow) (err error) {
	if r == nil {
		// Another process may have the worker (shared PostgreSQL), so this
		// is an ordinary, retried failure.
		return fmt.Errorf("no worker registered for kind %q", row.Kind)
	}
	ctx := base
	if row.Tenant != "" {
		ctx = tenant.With(ctx, row.Tenant)
	}
	if t := r.spec.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, errTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	err = r.run(ctx, row)
	if err != nil && errors.Is(context.Cause(ctx), errTimeout) {
		err = fmt.Errorf("timed out after %s: %w", r.spec.Timeout, err)
	}
	return err
}
