package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// ErrNotShardLocal is returned by EnqueueTx on a shard when
// jobs.postgres.shard_local is off: shards then have no jobs table.
var ErrNotShardLocal = errors.New("jobs: enqueue in a shard transaction needs jobs.postgres.shard_local = true; without it jobs live in the control database only")

// Backend is the PostgreSQL jobs.Backend of a cell: the jobs table of the
// control database and, with Config.ShardLocal, of every shard (one DB
// each), served to one jobs.Client whose workers are split evenly among
// the databases (worker i serves database i / (Workers / databases)). Each
// database has its own fetcher, LISTEN connection and maintenance leader,
// so a database that is down stops only its own workers. Plain enqueues go
// to the control database (through its circuit breaker); an enqueue in a
// transaction goes to the transaction's database; an outcome goes to the
// database its job came from.
type Backend struct {
	cfg   Config
	log   *slog.Logger
	dbs   []*DB    // control first, then the shards in spec order
	dsns  []string // of dbs; "" for a database given migrated (NewPool)
	per   int      // workers per database, set by Open
	ready *prometheus.GaugeVec
	logs  logLimiter

	// migrate applies the job backend's migrations to one database;
	// Migrate outside tests.
	migrate    func(ctx context.Context, dsn string) error
	migrateGo  sync.Once // the first Claim starts the background migrations
	cancelMigr context.CancelFunc
	migrations sync.WaitGroup

	mu     sync.Mutex
	failed map[string]error // by database: a migration that failed in it
}

// New returns the Backend of set's databases (see Backend): o's Registry
// receives the control database's breaker metrics and
// cellgate_jobs_database_ready. Nothing touches a database until the
// Client's workers first claim: then the jobs tables are created in the
// background (retrying while a database is down), and each database's
// workers and maintenance start once its table exists. A process that only
// enqueues calls Migrate instead.
func New(set *shards.Set, cfg Config, o Options) (*Backend, error) {
	if set == nil {
		return nil, errors.New("pgjobs: New: nil shard set")
	}
	b, err := newBackend(cfg, o)
	if err != nil {
		return nil, err
	}
	add := func(pool *pgxpool.Pool, dsn string, oo Options) error {
		db, err := newTableDB(pool, cfg, oo)
		if err != nil {
			return err
		}
		b.dbs, b.dsns = append(b.dbs, db), append(b.dsns, dsn)
		return nil
	}
	if err := add(set.Control(), set.ControlDSN(), Options{Name: shards.ControlName, Logger: o.Logger, Breaker: true, Registry: o.Registry, Limits: o.Limits, TraceContext: o.TraceContext}); err != nil {
		return nil, err
	}
	if cfg.ShardLocal {
		for _, sh := range set.Shards() {
			if err := add(sh.Pool, sh.DSN, Options{Name: sh.Name, Logger: o.Logger, Limits: o.Limits, TraceContext: o.TraceContext}); err != nil {
				return nil, err
			}
		}
	}
	return b, b.registerReady(o.Registry)
}

// NewPool returns a Backend over one database, pool's, whose jobs table
// must already exist (Migrate): a service without shards, a benchmark, a
// test. o's Name, Breaker and Registry apply to it as to NewDB.
func NewPool(pool *pgxpool.Pool, cfg Config, o Options) (*Backend, error) {
	b, err := newBackend(cfg, o)
	if err != nil {
		return nil, err
	}
	db, err := NewDB(pool, cfg, o)
	if err != nil {
		return nil, err
	}
	b.dbs, b.dsns = []*DB{db}, []string{""}
	return b, b.registerReady(o.Registry)
}

func newBackend(cfg Config, o Options) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Backend{
		cfg:     cfg,
		log:     log,
		migrate: Migrate,
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellgate_jobs_database_ready",
			Help: "1 once the job backend has migrated the database's jobs table, by database (control or shard name).",
		}, []string{"database"}),
	}, nil
}

func (b *Backend) registerReady(reg *prometheus.Registry) error {
	for _, db := range b.dbs {
		if db.Ready() {
			b.ready.WithLabelValues(db.name).Set(1)
		} else {
			b.ready.WithLabelValues(db.name).Set(0)
		}
	}
	if reg != nil {
		if err := reg.Register(b.ready); err != nil {
			return fmt.Errorf("pgjobs: register metrics: %w", err)
		}
	}
	return nil
}

// Databases returns the databases, control first: the console's view of
// each jobs table.
func (b *Backend) Databases() []*DB { return append([]*DB(nil), b.dbs...) }

// Control is the control database's DB.
func (b *Backend) Control() *DB { return b.dbs[0] }

// Shard returns the DB of the shard named name, or nil (always nil without
// ShardLocal).
func (b *Backend) Shard(name string) *DB {
	for _, db := range b.dbs[1:] {
		if db.name == name {
			return db
		}
	}
	return nil
}

// migrateInBackground starts one goroutine per database not yet ready that
// migrates it until it works, fails in the database, or Close.
func (b *Backend) migrateInBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	b.mu.Lock()
	b.cancelMigr = cancel
	b.mu.Unlock()
	for i, db := range b.dbs {
		if db.Ready() {
			continue
		}
		b.migrations.Add(1)
		go func() {
			defer b.migrations.Done()
			b.migrateUntilReady(ctx, db, b.dsns[i])
		}()
	}
}

// migrateUntilReady applies the migrations to one database until it works
// or ctx ends, then marks it ready.
func (b *Backend) migrateUntilReady(ctx context.Context, db *DB, dsn string) {
	retry := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		err := b.migrate(ctx, dsn)
		if err == nil {
			b.markReady(db)
			b.log.Info("pgjobs: jobs table ready", "jobs_db", db.name)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if dbmigrate.IsFailed(err) {
			// PostgreSQL rejected a file or the database is dirty: trying
			// again cannot help, an operator must repair it.
			b.mu.Lock()
			if b.failed == nil {
				b.failed = map[string]error{}
			}
			b.failed[db.name] = err
			b.mu.Unlock()
			b.log.Error("pgjobs: the jobs migrations failed; this database's jobs stay stopped until it is repaired", "jobs_db", db.name, "err", err)
			return
		}
		b.log.Warn("pgjobs: migrating the jobs table failed; retrying", "jobs_db", db.name, "err", err, "in", retry.next)
		if !retry.wait(ctx.Done()) {
			return
		}
	}
}

func (b *Backend) markReady(db *DB) {
	db.markReady()
	b.ready.WithLabelValues(db.name).Set(1)
}

// Migrate applies the job backend's migrations to every database now, in
// order (control first), and marks each ready, so in-transaction enqueues
// work without workers. It is for a process that enqueues but runs no
// workers (tests, operator tools); the workers' first Claim migrates in the
// background by itself. The first failure is returned, naming its
// database; the databases before it stay ready.
func (b *Backend) Migrate(ctx context.Context) error {
	for i, db := range b.dbs {
		if db.Ready() {
			continue
		}
		if err := b.migrate(ctx, b.dsns[i]); err != nil {
			return fmt.Errorf("%s: jobs: %w", db.name, err)
		}
		b.markReady(db)
	}
	return nil
}

// MigrationFailures returns, by database name, the job backend's
// migrations that failed in the database (a *dbmigrate.Error): the backend
// does not retry those, so the databases stay in NotReady until an
// operator repairs them and restarts the process.
func (b *Backend) MigrationFailures() map[string]error {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]error, len(b.failed))
	for k, v := range b.failed {
		out[k] = v
	}
	return out
}

// NotReady lists the databases whose jobs table does not exist yet.
func (b *Backend) NotReady() []string {
	var out []string
	for _, db := range b.dbs {
		if !db.Ready() {
			out = append(out, db.name)
		}
	}
	return out
}

// Capabilities: no tenant slots or lanes (the fair claim order,
// Config.Claim, works without them); periodic jobs, scheduled by the
// control database's maintenance leader; cancellation of running jobs.
func (b *Backend) Capabilities() jobs.Capabilities {
	return jobs.Capabilities{Periodic: true, CancelRunning: true}
}

// Open splits p.Workers evenly among the databases (jobs.workers counts
// per database: pass it times len(Databases())) and opens each.
func (b *Backend) Open(ctx context.Context, p jobs.OpenParams) error {
	n := len(b.dbs)
	if p.Workers < n || p.Workers%n != 0 {
		return fmt.Errorf("pgjobs: Open: %d workers do not split evenly over %d databases (jobs.workers counts per database)", p.Workers, n)
	}
	b.per = p.Workers / n
	sub := p
	sub.Workers = b.per
	for i, db := range b.dbs {
		// Periodic jobs are the control database's: once per cell, never
		// per shard.
		sub.Periodic = nil
		if i == 0 {
			sub.Periodic = p.Periodic
		}
		if err := db.open(ctx, sub); err != nil {
			for _, o := range b.dbs[:i] {
				_ = o.close(ctx)
			}
			return err
		}
	}
	return nil
}

// Insert commits a job to the control database, through its circuit
// breaker (ErrBreakerOpen while it is open).
func (b *Backend) Insert(ctx context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	return b.dbs[0].insert(ctx, p)
}

// InsertMany commits the jobs to the control database with one round trip
// and one commit, all or none, through its circuit breaker.
func (b *Backend) InsertMany(ctx context.Context, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	return b.dbs[0].insertMany(ctx, ps)
}

// InsertTx writes the job with tx to the jobs table of tx's database
// (tx.Shard(), or the control database for a control transaction), without
// the circuit breaker. On a shard whose jobs table does not exist yet it
// returns an error wrapping ErrShardJobsNotReady, and on a shard without
// ShardLocal ErrNotShardLocal.
func (b *Backend) InsertTx(ctx context.Context, tx shards.Tx, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	db, err := b.dbOf(tx)
	if err != nil {
		return jobs.EnqueueResult{}, err
	}
	return db.insertTx(ctx, tx, p)
}

// InsertManyTx writes the jobs with tx in one round trip, to tx's database
// as InsertTx does (and with its errors).
func (b *Backend) InsertManyTx(ctx context.Context, tx shards.Tx, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	db, err := b.dbOf(tx)
	if err != nil {
		return nil, err
	}
	return db.insertManyTx(ctx, tx, ps)
}

// Cancel cancels job id of the control database, where Insert writes: a
// waiting job is failed at once; a running one (in any process) has its
// cancellation recorded and sent to its process (NOTIFY, within
// milliseconds; or its next heartbeat, within RescueAfter/4 capped at 30 s,
// if the notification is lost), which cancels the job's context. See
// jobs.Canceller.
func (b *Backend) Cancel(ctx context.Context, id jobs.JobID) error {
	cctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	db := b.dbs[0]
	// A job of this process that has ended is not running any more: its
	// buffered completion is written first (a no-op when none is).
	if db.Ready() {
		if err := db.flushDone(cctx); err != nil {
			return fmt.Errorf("pgjobs: cancel job %d of %s: %w", id, db.name, err)
		}
	}
	return db.cancelOn(cctx, db.pool, id, false)
}

// CancelTx is Cancel of job id of tx's database with tx: the cancellation
// holds, and reaches a running job's process, if and only if tx commits.
func (b *Backend) CancelTx(ctx context.Context, tx shards.Tx, id jobs.JobID) error {
	db, err := b.dbOf(tx)
	if err != nil {
		return err
	}
	return db.cancelOn(ctx, tx, id, true)
}

var _ jobs.Canceller = (*Backend)(nil)

// dbOf returns the DB of tx's database, ready for an insert.
func (b *Backend) dbOf(tx shards.Tx) (*DB, error) {
	if tx.Tx == nil {
		return nil, errors.New("pgjobs: enqueue in a transaction: no transaction")
	}
	sh := tx.Shard()
	if sh == nil {
		return b.dbs[0], nil
	}
	if !b.cfg.ShardLocal {
		return nil, ErrNotShardLocal
	}
	// A cell opens only its own shards, so look the shard up by name: its
	// spec index is not its position in dbs.
	db := b.Shard(sh.Name)
	if db == nil {
		return nil, fmt.Errorf("pgjobs: enqueue in a transaction: shard %q (index %d) is not one of this backend's", sh.Name, sh.Index)
	}
	if !db.Ready() {
		return nil, fmt.Errorf("%w (shard %s)", ErrShardJobsNotReady, sh.Name)
	}
	return db, nil
}

// Claim waits for a job of worker's database. The first Claim starts the
// background migrations of the databases not ready yet.
func (b *Backend) Claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
	if worker < 0 || b.per == 0 || worker >= b.per*len(b.dbs) {
		return nil, fmt.Errorf("pgjobs: Claim: worker %d out of range", worker)
	}
	b.migrateGo.Do(b.migrateInBackground)
	return b.dbs[worker/b.per].claim(ctx, worker%b.per)
}

func owner(row *jobs.JobRow) (*DB, error) {
	if row != nil {
		if db, ok := row.Handle.(*DB); ok {
			return db, nil
		}
	}
	return nil, errors.New("pgjobs: row was not claimed from this backend")
}

// Complete records success in the job's database; see DB's buffering.
func (b *Backend) Complete(ctx context.Context, row *jobs.JobRow) error {
	db, err := owner(row)
	if err != nil {
		return err
	}
	return db.complete(ctx, row)
}

// Retry makes the job available again after delay, in its database.
func (b *Backend) Retry(ctx context.Context, row *jobs.JobRow, delay time.Duration, errMsg string) error {
	db, err := owner(row)
	if err != nil {
		return err
	}
	return db.retry(ctx, row, delay, errMsg)
}

// Snooze makes the job available again after delay without counting the
// attempt, in its database.
func (b *Backend) Snooze(ctx context.Context, row *jobs.JobRow, delay time.Duration) error {
	db, err := owner(row)
	if err != nil {
		return err
	}
	return db.snooze(ctx, row, delay)
}

// Fail records that the job failed for good, in its database.
func (b *Backend) Fail(ctx context.Context, row *jobs.JobRow, errMsg string) error {
	db, err := owner(row)
	if err != nil {
		return err
	}
	return db.fail(ctx, row, errMsg)
}

// Stats sums the queues over the databases. A database that cannot answer
// is left out (and logged) so one database that is down does not blank the
// queue-depth gauges of the others; only if none answers is it an error.
func (b *Backend) Stats(ctx context.Context) ([]jobs.QueueStats, error) {
	sum := map[string]*jobs.QueueStats{}
	var order []string
	var errs []error
	for _, db := range b.dbs {
		st, err := db.Stats(ctx)
		if err != nil {
			errs = append(errs, err)
			if ok, _ := b.logs.allow("stats:" + db.name); ok {
				b.log.Warn("pgjobs: queue depth of a database unavailable", "jobs_db", db.name, "err", err)
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
	if len(errs) == len(b.dbs) {
		return nil, errors.Join(errs...)
	}
	sort.Strings(order)
	out := make([]jobs.QueueStats, len(order))
	for i, q := range order {
		out[i] = *sum[q]
	}
	return out, nil
}

// PauseQueue pauses queue in every database (see DB.PauseQueue); it
// reports whether it was running in any. The first error stops it.
func (b *Backend) PauseQueue(ctx context.Context, queue string) (bool, error) {
	return b.eachDB(func(db *DB) (bool, error) { return db.PauseQueue(ctx, queue) })
}

// ResumeQueue resumes queue in every database; it reports whether it was
// paused in any.
func (b *Backend) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	return b.eachDB(func(db *DB) (bool, error) { return db.ResumeQueue(ctx, queue) })
}

func (b *Backend) eachDB(f func(*DB) (bool, error)) (bool, error) {
	changed := false
	for _, db := range b.dbs {
		c, err := f(db)
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

// PausedQueues lists the queues paused in any database, by name.
func (b *Backend) PausedQueues(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, db := range b.dbs {
		qs, err := db.PausedQueues(ctx)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Close stops the background migrations and closes every database (see
// DB's Close); it waits for the migrations until ctx is done.
func (b *Backend) Close(ctx context.Context) error {
	b.migrateGo.Do(func() {}) // no migrations start from now on
	b.mu.Lock()
	cancel := b.cancelMigr
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	var errs []error
	for _, db := range b.dbs {
		if err := db.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() {
		b.migrations.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return errors.Join(errs...)
}

var (
	_ jobs.Backend     = (*Backend)(nil)
	_ jobs.QueuePauser = (*Backend)(nil)
)
