package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// ErrNotShardLocal is returned by EnqueueTx on a shard when
// jobs.postgres.shard_local is off: shards then have no jobs table.
var ErrNotShardLocal = errors.New("jobs: enqueue in a shard transaction needs jobs.postgres.shard_local = true; without it jobs live in the control database only")

// Runtime is the PostgreSQL job runtime of a cell: a Backend on the control
// database and, with Config.ShardLocal, one on every shard, driven by one
// jobs.Client whose workers are split evenly among the databases (the
// Client's jobs.Config.Workers per database). Each database has its own
// fetcher, LISTEN connection and maintenance leader, so a database that is
// down stops only its own workers. The Client's metrics (queue depth
// included) cover every database.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	control *Backend
	shards  []*Backend // the cell's shards in spec order; nil without ShardLocal
	all     []*Backend // control first
	dsns    []string   // of all
	client  *jobs.Client
	ready   *prometheus.GaugeVec

	// migrate applies the job backend's migrations to one database;
	// Migrate outside tests.
	migrate func(ctx context.Context, dsn string) error

	mu         sync.Mutex
	failed     map[string]error // by database: a migration that failed in it
	started    bool
	stopped    bool
	cancelMigr context.CancelFunc
	migrations sync.WaitGroup
}

// NewRuntime builds the runtime over set's databases. jcfg is the `jobs`
// block (Workers is per database); w holds the handlers (nil for a process
// that only enqueues); o's Registry receives the Client's metrics, the
// breaker's and cellgate_jobs_database_ready. Nothing touches a database
// until Start, and Enqueue works at once.
func NewRuntime(ctx context.Context, set *shards.Set, cfg Config, jcfg jobs.Config, w *jobs.Workers, o jobs.Options) (*Runtime, error) {
	if set == nil {
		return nil, errors.New("pgjobs: NewRuntime: nil shard set")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Runtime{
		cfg:     cfg,
		log:     log,
		migrate: Migrate,
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellgate_jobs_database_ready",
			Help: "1 once the job runtime has migrated the database's jobs table, by database (control or shard name).",
		}, []string{"database"}),
	}
	ctrl, err := newBackend(set.Control(), cfg, Options{Name: shards.ControlName, Logger: log, Breaker: true, Registry: o.Registry})
	if err != nil {
		return nil, err
	}
	r.control = ctrl
	r.all = append(r.all, ctrl)
	r.dsns = append(r.dsns, set.ControlDSN())
	if cfg.ShardLocal {
		for _, sh := range set.Shards() {
			b, err := newBackend(sh.Pool, cfg, Options{Name: sh.Name, Logger: log})
			if err != nil {
				return nil, err
			}
			r.shards = append(r.shards, b)
			r.all = append(r.all, b)
			r.dsns = append(r.dsns, sh.DSN)
		}
	}
	for _, b := range r.all {
		r.ready.WithLabelValues(b.name).Set(0)
	}
	if o.Registry != nil {
		if err := o.Registry.Register(r.ready); err != nil {
			return nil, fmt.Errorf("pgjobs: register metrics: %w", err)
		}
	}
	per := jcfg.WithDefaults().Workers
	ccfg := jcfg
	ccfg.Workers = per * len(r.all)
	mb := &multiBackend{members: r.all, per: per, log: log}
	r.client, err = jobs.NewClient(ctx, ccfg, mb, w, o)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Client is the jobs.Client that runs the workers of every database.
func (r *Runtime) Client() *jobs.Client { return r.client }

// Control is the control database's backend.
func (r *Runtime) Control() *Backend { return r.control }

// Shard returns the backend of the shard named name, or nil (always nil
// without ShardLocal).
func (r *Runtime) Shard(name string) *Backend {
	for _, b := range r.shards {
		if b.name == name {
			return b
		}
	}
	return nil
}

// Start migrates every database in the background (retrying with backoff
// while one is down, giving up on one whose migration failed in the
// database: see MigrationFailures; each database's workers and maintenance start once its
// table exists) and starts the workers. ctx provides values only; Stop ends
// everything.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return jobs.ErrClosed
	}
	if r.started {
		return errors.New("pgjobs: Runtime.Start called twice")
	}
	r.started = true
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancelMigr = cancel
	for i, b := range r.all {
		r.migrations.Add(1)
		go func() {
			defer r.migrations.Done()
			r.migrateUntilReady(mctx, b, r.dsns[i])
		}()
	}
	return r.client.Start(ctx)
}

// migrateUntilReady applies the migrations to one database until it works
// or ctx ends, then marks its backend ready.
func (r *Runtime) migrateUntilReady(ctx context.Context, b *Backend, dsn string) {
	retry := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		err := r.migrate(ctx, dsn)
		if err == nil {
			b.markReady()
			r.ready.WithLabelValues(b.name).Set(1)
			r.log.Info("pgjobs: jobs table ready", "jobs_db", b.name)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if dbmigrate.IsFailed(err) {
			// PostgreSQL rejected a file or the database is dirty: trying
			// again cannot help, an operator must repair it.
			r.mu.Lock()
			if r.failed == nil {
				r.failed = map[string]error{}
			}
			r.failed[b.name] = err
			r.mu.Unlock()
			r.log.Error("pgjobs: the jobs migrations failed; this database's jobs stay stopped until it is repaired", "jobs_db", b.name, "err", err)
			return
		}
		r.log.Warn("pgjobs: migrating the jobs table failed; retrying", "jobs_db", b.name, "err", err, "in", retry.next)
		if !retry.wait(ctx.Done()) {
			return
		}
	}
}

// Migrate applies the job backend's migrations to every database of the
// runtime now, in order (control first), and marks each ready, so
// in-transaction enqueues work without Start. It is for a process that
// enqueues but runs no workers (tests, operator tools); Start migrates by
// itself, in the background. The first failure is returned, naming its
// database; the databases before it stay ready.
func (r *Runtime) Migrate(ctx context.Context) error {
	for i, b := range r.all {
		if err := r.migrate(ctx, r.dsns[i]); err != nil {
			return fmt.Errorf("%s: jobs: %w", b.name, err)
		}
		b.markReady()
		r.ready.WithLabelValues(b.name).Set(1)
	}
	return nil
}

// MigrationFailures returns, by database name, the job backend's
// migrations that failed in the database (a *dbmigrate.Error): the runtime
// does not retry those, so the databases stay in NotReady until an
// operator repairs them and restarts the process.
func (r *Runtime) MigrationFailures() map[string]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]error, len(r.failed))
	for k, v := range r.failed {
		out[k] = v
	}
	return out
}

// NotReady lists the databases whose jobs table the runtime has not
// created yet.
func (r *Runtime) NotReady() []string {
	var out []string
	for _, b := range r.all {
		if !b.Ready() {
			out = append(out, b.name)
		}
	}
	return out
}

// Stop stops the background migrations and the Client (graceful drain,
// see jobs.Client.Stop), which closes every backend. Idempotent.
func (r *Runtime) Stop(ctx context.Context) (jobs.StopReport, error) {
	r.mu.Lock()
	r.stopped = true
	cancel := r.cancelMigr
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	rep, err := r.client.Stop(ctx)
	done := make(chan struct{})
	go func() {
		r.migrations.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return rep, err
}

// Enqueue commits a job to the control database (through its circuit
// breaker); see jobs.Client.Enqueue. It returns ErrBreakerOpen while the
// breaker is open.
func (r *Runtime) Enqueue(ctx context.Context, args jobs.Args, opts ...jobs.EnqueueOption) (jobs.EnqueueResult, error) {
	return r.client.Enqueue(ctx, args, opts...)
}

// EnqueueTx inserts a job with the caller's transaction tx, so the job
// exists if and only if tx commits; the job goes to the jobs table of tx's
// database (tx.Shard(), or the control database's for a control
// transaction). The tenant is taken from ctx as for Enqueue. On a shard
// whose jobs table does not exist yet it returns an error wrapping
// ErrShardJobsNotReady, and on a shard without ShardLocal ErrNotShardLocal.
// It does not use the circuit breaker.
func (r *Runtime) EnqueueTx(ctx context.Context, tx shards.Tx, args jobs.Args, opts ...jobs.EnqueueOption) (jobs.EnqueueResult, error) {
	if _, err := r.backendOf(tx); err != nil {
		return jobs.EnqueueResult{}, err
	}
	return r.client.EnqueueTx(ctx, tx, args, opts...)
}

// EnqueueMany commits the jobs to the control database with one round
// trip and one commit, all or none (through its circuit breaker); see
// jobs.Client.EnqueueMany.
func (r *Runtime) EnqueueMany(ctx context.Context, args []jobs.Args, opts ...jobs.EnqueueOption) ([]jobs.EnqueueResult, error) {
	return r.client.EnqueueMany(ctx, args, opts...)
}

// EnqueueManyTx writes the jobs with the caller's transaction tx in one
// round trip, to tx's database as EnqueueTx does (and with its errors).
func (r *Runtime) EnqueueManyTx(ctx context.Context, tx shards.Tx, args []jobs.Args, opts ...jobs.EnqueueOption) ([]jobs.EnqueueResult, error) {
	if _, err := r.backendOf(tx); err != nil {
		return nil, err
	}
	return r.client.EnqueueManyTx(ctx, tx, args, opts...)
}

// backendOf returns the backend of tx's database, ready for an insert.
func (r *Runtime) backendOf(tx shards.Tx) (*Backend, error) {
	sh := tx.Shard()
	if sh == nil {
		return r.control, nil
	}
	if !r.cfg.ShardLocal {
		return nil, ErrNotShardLocal
	}
	// A cell opens only its own shards, so look the shard up by name: its
	// spec index is not its position in r.shards.
	b := r.Shard(sh.Name)
	if b == nil {
		return nil, fmt.Errorf("pgjobs: EnqueueTx: shard %q (index %d) is not a shard of this runtime", sh.Name, sh.Index)
	}
	if !b.Ready() {
		return nil, fmt.Errorf("%w (shard %s)", ErrShardJobsNotReady, sh.Name)
	}
	return b, nil
}

var _ jobs.Enqueuer = (*Runtime)(nil)

// List returns the jobs matching f across the control database and the
// shards, newest first (by created_at), at most f's limit in all. A
// database that cannot be read is skipped: List returns what the others
// hold together with an error naming it.
func (r *Runtime) List(ctx context.Context, f ListFilter) ([]JobInfo, error) {
	var out []JobInfo
	var errs []error
	for _, b := range r.all {
		if f.Database != "" && f.Database != b.name {
			continue
		}
		js, err := b.List(ctx, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, js...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		if out[i].Database != out[j].Database {
			return out[i].Database < out[j].Database
		}
		return out[i].ID > out[j].ID
	})
	if n := f.limit(); len(out) > n {
		out = out[:n]
	}
	return out, errors.Join(errs...)
}

// multiBackend is the one jobs.Backend the Runtime's Client drives: worker
// i belongs to database i / per, plain inserts go to the control database,
// in-transaction ones to the transaction's database, and outcomes go
// back to the backend that claimed the job.
type multiBackend struct {
	members []*Backend
	per     int
	log     *slog.Logger
	logs    logLimiter
}

func (m *multiBackend) Capabilities() jobs.Capabilities { return jobs.Capabilities{} }

func (m *multiBackend) Open(ctx context.Context, p jobs.OpenParams) error {
	if p.Workers != m.per*len(m.members) {
		return fmt.Errorf("pgjobs: runtime opened with %d workers, want %d per database × %d", p.Workers, m.per, len(m.members))
	}
	sub := p
	sub.Workers = m.per
	for i, b := range m.members {
		if err := b.Open(ctx, sub); err != nil {
			for _, o := range m.members[:i] {
				_ = o.Close(ctx)
			}
			return err
		}
	}
	return nil
}

func (m *multiBackend) Insert(ctx context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	return m.members[0].Insert(ctx, p)
}

// InsertTx goes to the member of tx's database (Runtime.EnqueueTx has
// checked it is one).
func (m *multiBackend) InsertTx(ctx context.Context, tx shards.Tx, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	for _, b := range m.members {
		if b.name == tx.Database() {
			return b.InsertTx(ctx, tx, p)
		}
	}
	return jobs.EnqueueResult{}, fmt.Errorf("pgjobs: EnqueueTx: database %q is not one of this runtime's", tx.Database())
}

func (m *multiBackend) InsertMany(ctx context.Context, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	return m.members[0].InsertMany(ctx, ps)
}

// InsertManyTx goes to the member of tx's database, as InsertTx.
func (m *multiBackend) InsertManyTx(ctx context.Context, tx shards.Tx, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	for _, b := range m.members {
		if b.name == tx.Database() {
			return b.InsertManyTx(ctx, tx, ps)
		}
	}
	return nil, fmt.Errorf("pgjobs: EnqueueManyTx: database %q is not one of this runtime's", tx.Database())
}

func (m *multiBackend) Claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
	if worker < 0 || worker >= m.per*len(m.members) {
		return nil, fmt.Errorf("pgjobs: Claim: worker %d out of range", worker)
	}
	return m.members[worker/m.per].Claim(ctx, worker%m.per)
}

func owner(row *jobs.JobRow) (*Backend, error) {
	if row != nil {
		if b, ok := row.Handle.(*Backend); ok {
			return b, nil
		}
	}
	return nil, errors.New("pgjobs: row was not claimed from this runtime")
}

func (m *multiBackend) Complete(ctx context.Context, row *jobs.JobRow) error {
	b, err := owner(row)
	if err != nil {
		return err
	}
	return b.Complete(ctx, row)
}

func (m *multiBackend) Retry(ctx context.Context, row *jobs.JobRow, delay time.Duration, errMsg string) error {
	b, err := owner(row)
	if err != nil {
		return err
	}
	return b.Retry(ctx, row, delay, errMsg)
}

func (m *multiBackend) Fail(ctx context.Context, row *jobs.JobRow, errMsg string) error {
	b, err := owner(row)
	if err != nil {
		return err
	}
	return b.Fail(ctx, row, errMsg)
}

// Stats sums the queues over the databases. A database that cannot answer
// is left out (and logged) so one database that is down does not blank the
// queue-depth gauges of the others; only if none answers is it an error.
func (m *multiBackend) Stats(ctx context.Context) ([]jobs.QueueStats, error) {
	sum := map[string]*jobs.QueueStats{}
	var order []string
	var errs []error
	for _, b := range m.members {
		st, err := b.Stats(ctx)
		if err != nil {
			errs = append(errs, err)
			if ok, _ := m.logs.allow("stats:" + b.name); ok {
				m.log.Warn("pgjobs: queue depth of a database unavailable", "jobs_db", b.name, "err", err)
			}
			continue
		}
		for _, s := range st {
			t := sum[s.Queue]
			if t == nil {
				t = &jobs.QueueStats{Queue: s.Queue}
				sum[s.Queue] = t
				order = append(order, s.Queue)
			}
			t.Waiting += s.Waiting
			t.Running += s.Running
		}
	}
	if len(errs) == len(m.members) {
		return nil, errors.Join(errs...)
	}
	sort.Strings(order)
	out := make([]jobs.QueueStats, len(order))
	for i, q := range order {
		out[i] = *sum[q]
	}
	return out, nil
}

func (m *multiBackend) Close(ctx context.Context) error {
	var errs []error
	for _, b := range m.members {
		if err := b.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var _ jobs.Backend = (*multiBackend)(nil)

var (
	_ jobs.BatchInserter   = (*multiBackend)(nil)
	_ jobs.TxBatchInserter = (*multiBackend)(nil)
)
