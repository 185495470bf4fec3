package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/runtime/shards"
)

// jobRuntime is the cell's job runtime as the server drives it.
type jobRuntime interface {
	// EnqueueTx enqueues inside a shard transaction (app.TxEnqueuer).
	EnqueueTx(ctx context.Context, shard *shards.Shard, tx pgx.Tx, args jobs.Args, opts ...jobs.EnqueueOption) (jobs.EnqueueResult, error)
	// Start registers the app's workers and starts working.
	Start(ctx context.Context, register func(*jobs.Workers)) error
	// Stop drains within ctx's deadline.
	Stop(ctx context.Context)
}

// jobsConfig maps the spec's jobs block onto the runtime's config.
func jobsConfig(c config.Jobs) jobs.Config {
	cfg := jobs.Config{
		Workers: c.Workers,
		Tenants: jobs.TenantConfig{
			MaxConcurrent:  c.Tenants.MaxConcurrent,
			Lanes:          c.Tenants.Lanes,
			LanesPerTenant: c.Tenants.LanesPerTenant,
		},
		ShutdownTimeout: c.ShutdownTimeout.D(),
	}
	return cfg.WithDefaults()
}

// startJobs builds the runtime the spec asks for; workers start later
// (after migrations) through Start.
func startJobs(_ context.Context, cfg config.Config, set *shards.Set, srv *runtime.Server, log *slog.Logger) (jobRuntime, error) {
	switch cfg.Jobs.Backend {
	case "local":
		return &localJobs{cfg: jobsConfig(cfg.Jobs), srv: srv, log: log}, nil
	case "postgres":
		return newPostgresJobs(cfg, set, srv, log)
	}
	return nil, fmt.Errorf("jobs.backend: unknown backend %q", cfg.Jobs.Backend)
}

// localJobs runs the in-memory backend: fair tenant order, slots and lanes,
// but no durability and no in-transaction enqueue.
type localJobs struct {
	cfg    jobs.Config
	srv    *runtime.Server
	log    *slog.Logger
	client *jobs.Client
}

// errNoTxEnqueue explains why the local backend cannot join a transaction.
var errNoTxEnqueue = errors.New("jobs: an in-transaction enqueue needs jobs.backend = \"postgres\"; the local backend keeps jobs in memory")

func (l *localJobs) EnqueueTx(context.Context, *shards.Shard, pgx.Tx, jobs.Args, ...jobs.EnqueueOption) (jobs.EnqueueResult, error) {
	return jobs.EnqueueResult{}, errNoTxEnqueue
}

func (l *localJobs) Start(ctx context.Context, register func(*jobs.Workers)) error {
	w := jobs.NewWorkers()
	register(w)
	c, err := jobs.NewClient(ctx, l.cfg, local.New(), w, jobs.Options{Logger: l.log, Registry: l.srv.Registry()})
	if err != nil {
		return err
	}
	l.client = c
	return c.Start(ctx)
}

func (l *localJobs) Stop(ctx context.Context) {
	if l.client == nil {
		return
	}
	rep, err := l.client.Stop(ctx)
	if err != nil {
		l.log.Warn("jobs stopped with an error", "error", err.Error(), "report", fmt.Sprint(rep))
	}
}
