// Package celltest is what a user's tests of handlers and workers build on:
// Start gives a test its own cell databases (control and every shard of
// the spec, fresh, migrated with the app's and the job runtime's
// migrations, dropped when the test ends), with the shard set and an
// Enqueuer over them; Tenant makes a tenant's context; RequireEnqueuedTx
// asserts that a job was written in a transaction, as River's
// rivertest.RequireInsertedTx does; Work runs a worker method on one job,
// with its shard accessor, as the job runtime would, without the runtime.
//
// Each Start creates its own databases, so tests that call it may run in
// parallel and never see each other's rows. Tests that share one Cell stay
// apart by using different tenants (every app table is a tenant table).
//
// Concurrency: a Cell is safe for concurrent use by the tests (and the
// handlers) that share it; Start and the Require functions call t.Fatal and
// so must run on the test's goroutine.
package celltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
	"github.com/cellgate/cellgate/internal/testpg"
)

// Options are what Start needs besides the config.
type Options struct {
	// Migrate applies the app's migrations to one database, given its
	// postgres:// URL: the app's sql.Migrate. Start applies it where
	// database.app_migrations says (the shards by default), as the server
	// does. Nil applies none.
	Migrate func(ctx context.Context, dsn string) error
	// Log receives the job runtime's logs; nil discards them.
	Log *slog.Logger
}

// Cell is a test's cell: its databases and an Enqueuer over them.
type Cell struct {
	// Config is the config Start was given; its DSN variables are the keys
	// of Getenv.
	Config config.Config
	// Shards are the cell's databases, migrated. Pass them to the handlers
	// (app.Deps.Shards) and workers under test.
	Shards *shards.Set
	// Jobs enqueues into the cell's job tables: with jobs.backend =
	// "postgres", a client of a pgjobs.Backend over Shards that is never
	// started, so jobs are written (EnqueueTx included) but nothing runs
	// them; call the worker with Work. With "local", an in-memory client
	// whose EnqueueTx answers jobs.ErrNoTxEnqueue, as the server's does.
	Jobs jobs.Enqueuer

	env map[string]string
}

// Start creates the cell's databases on the test server (internal/testpg:
// $CELLGATE_TEST_PG), applies o.Migrate (see Options) and, with jobs.backend =
// "postgres", the job backend's migrations (on control, and on every shard
// with jobs.postgres.shard_local: pgjobs.Backend.Migrate), opens
// them as cfg's shard set and registers their cleanup. cfg is typically
// the spec's defaults, gen/spec.Config(). A database that cannot be
// created or migrated fails the test.
func Start(t testing.TB, cfg config.Config, o Options) *Cell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cell{Config: cfg, env: map[string]string{}}
	type database struct{ name, env string }
	dbs := []database{{shards.ControlName, cfg.Database.Control.DSNEnv}}
	for _, s := range cfg.Database.Shards {
		dbs = append(dbs, database{s.Name, s.DSNEnv})
	}
	for i, d := range dbs {
		dsn := testpg.CreateDB(t, d.name)
		c.env[d.env] = dsn
		onControl, onShards := cfg.Database.AppMigrationsOnControl(), cfg.Database.AppMigrationsOnShards()
		if o.Migrate != nil && ((i == 0 && onControl) || (i > 0 && onShards)) {
			if err := o.Migrate(ctx, dsn); err != nil {
				t.Fatalf("celltest: migrate %s: %v", d.name, err)
			}
		}
	}
	set, err := shards.Open(ctx, cfg.Database, c.Getenv)
	if err != nil {
		t.Fatalf("celltest: open the cell's databases: %v", err)
	}
	// Registered after the databases', so it runs before they are dropped.
	t.Cleanup(set.Close)
	c.Shards = set

	jcfg := jobs.Config{Workers: cfg.Jobs.Workers}.WithDefaults()
	var backend jobs.Backend
	switch cfg.Jobs.Backend {
	case "postgres":
		b, err := pgjobs.New(set, pgjobs.FromConfig(cfg.Jobs.Postgres), pgjobs.Options{Logger: o.Log})
		if err != nil {
			t.Fatalf("celltest: job backend: %v", err)
		}
		// The jobs tables, now: the client is never started.
		if err := b.Migrate(ctx); err != nil {
			t.Fatalf("celltest: %v", err)
		}
		jcfg.Workers *= len(b.Databases()) // jobs.workers counts per database
		backend = b
	case "local":
		backend = local.New()
	default:
		t.Fatalf("celltest: jobs.backend: unknown backend %q", cfg.Jobs.Backend)
	}
	client, err := jobs.NewClient(ctx, jcfg, backend, nil, jobs.Options{Logger: o.Log})
	if err != nil {
		t.Fatalf("celltest: job client: %v", err)
	}
	t.Cleanup(func() {
		// Nothing runs, so nothing drains.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.Stop(ctx)
	})
	c.Jobs = client
	return c
}

// Getenv answers the cell's DSN variables (the spec's dsn_env names) with
// its databases' URLs, and "" for anything else: a test's stand-in for the
// environment a deployed cell reads.
func (c *Cell) Getenv(name string) string { return c.env[name] }

// Tenant returns a context carrying the tenant id, as the tenancy
// middleware leaves it for a handler and the job runtime for a worker. It
// is t's context (cancelled when the test ends).
func Tenant(t testing.TB, id string) context.Context {
	return tenant.With(t.Context(), id)
}

// JobsTx runs fn in a transaction on the database that holds tenant id's
// jobs — its shard with jobs.postgres.shard_local, else the control
// database — and rolls it back, so fn can look at (or write) rows without
// leaving any. fn's failures end the test as usual.
func (c *Cell) JobsTx(t testing.TB, id string, fn func(tx shards.Tx)) {
	t.Helper()
	var sh *shards.Shard
	if c.Config.Jobs.Postgres.ShardLocal {
		var err error
		if sh, _, err = c.Shards.ForTenant(id); err != nil {
			t.Fatalf("celltest: tenant %q: %v", id, err)
		}
	}
	c.RollbackTx(t, sh, fn)
}

// RollbackTx runs fn in a transaction on shard sh (nil: the control
// database) and rolls it back when fn returns: a test's writes in fn are
// seen by the queries in fn and by nothing else.
func (c *Cell) RollbackTx(t testing.TB, sh *shards.Shard, fn func(tx shards.Tx)) {
	t.Helper()
	pool := c.Shards.Control()
	if sh != nil {
		pool = sh.Pool
	}
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatalf("celltest: begin: %v", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	fn(shards.WrapTx(tx, sh))
}

// jobsTable is the job backend's table (internal/jobs/pgjobs/migrations).
const jobsTable = "cellgate_jobs"

// RequireEnqueuedTx fails the test unless tx sees exactly one job of T's
// kind — enqueued in tx itself or committed before it began — whose
// arguments equal *want (compared as the JSON stored); a nil want matches
// any job of the kind. It returns the job as a worker would receive it.
// The job's tenant is in the returned Job's Tenant.
func RequireEnqueuedTx[T jobs.Args](t testing.TB, tx shards.Tx, want *T) *jobs.Job[T] {
	t.Helper()
	found := enqueued[T](t, tx, want)
	if len(found) != 1 {
		t.Fatalf("celltest: %s", describe[T](tx, want, len(found)))
	}
	return found[0]
}

// RequireNotEnqueuedTx fails the test if tx sees a job of T's kind whose
// arguments equal *want (any job of the kind, for a nil want).
func RequireNotEnqueuedTx[T jobs.Args](t testing.TB, tx shards.Tx, want *T) {
	t.Helper()
	if found := enqueued[T](t, tx, want); len(found) > 0 {
		t.Fatalf("celltest: %s", describe[T](tx, want, len(found)))
	}
}

// RequireEnqueued is RequireEnqueuedTx after the fact: it looks in the
// database that holds tenant id's jobs (see JobsTx), for a job the code
// under test has committed, and also requires the job's tenant to be id.
func RequireEnqueued[T jobs.Args](t testing.TB, c *Cell, id string, want *T) *jobs.Job[T] {
	t.Helper()
	var job *jobs.Job[T]
	c.JobsTx(t, id, func(tx shards.Tx) { job = RequireEnqueuedTx(t, tx, want) })
	if job.Tenant != id {
		t.Fatalf("celltest: the %s job %d belongs to tenant %q, want %q", job.Kind, job.ID, job.Tenant, id)
	}
	return job
}

func describe[T jobs.Args](tx shards.Tx, want *T, n int) string {
	var zero T
	what := fmt.Sprintf("%d %q jobs", n, zero.JobSpec().Name)
	if want != nil {
		b, _ := json.Marshal(*want)
		what += " with args " + string(b)
	}
	if n == 1 {
		what = strings.Replace(what, "jobs", "job", 1)
	}
	return fmt.Sprintf("found %s in %s's jobs table", what, tx.Database())
}

// enqueued returns the jobs of T's kind that tx sees, oldest first.
func enqueued[T jobs.Args](t testing.TB, tx shards.Tx, want *T) []*jobs.Job[T] {
	t.Helper()
	var zero T
	kind := zero.JobSpec().Name
	var wantJSON any // nil: any args
	if want != nil {
		b, err := json.Marshal(*want)
		if err != nil {
			t.Fatalf("celltest: encode the wanted args: %v", err)
		}
		wantJSON = string(b)
	}
	rows, err := tx.Query(t.Context(), `SELECT id, kind, queue, tenant, args, attempt, max_attempts, created_at
		FROM `+jobsTable+` WHERE kind = $1 AND ($2::jsonb IS NULL OR args = $2::jsonb) ORDER BY id`, kind, wantJSON)
	if err != nil {
		t.Fatalf("celltest: read %s's jobs table (is jobs.backend \"postgres\", and the job's database the one of tx?): %v", tx.Database(), err)
	}
	defer rows.Close()
	var out []*jobs.Job[T]
	for rows.Next() {
		j := &jobs.Job[T]{}
		var args []byte
		if err := rows.Scan(&j.ID, &j.Kind, &j.Queue, &j.Tenant, &args, &j.Attempt, &j.MaxAttempts, &j.EnqueuedAt); err != nil {
			t.Fatalf("celltest: scan a job: %v", err)
		}
		if err := json.Unmarshal(args, &j.Args); err != nil {
			t.Fatalf("celltest: decode the args of job %d: %v", j.ID, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("celltest: read %s's jobs table: %v", tx.Database(), err)
	}
	return out
}

// Work runs worker on one job of args, as the job runtime would run its
// first attempt: ctx's tenant (see Tenant) becomes the job's, the worker
// gets set's accessor for it (no database permits, as gen/jobkinds'
// RegisterWorkers builds it), and ctx ends at the kind's timeout. It
// returns the worker's error; test it with jobs.IsPermanent to tell
// "retry" from "give up".
func Work[T jobs.Args](ctx context.Context, set *shards.Set, worker func(context.Context, *jobs.Job[T], shards.Accessor) error, args T) error {
	spec := args.JobSpec()
	job := &jobs.Job[T]{
		Kind:        spec.Name,
		Queue:       spec.Queue,
		Attempt:     1,
		MaxAttempts: spec.MaxAttempts,
		EnqueuedAt:  time.Now(),
		Args:        args,
	}
	job.Tenant, _ = tenant.From(ctx)
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	return worker(ctx, job, set.Accessor(job.Tenant, nil))
}
