package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// jobRuntime is the cell's job runtime as the server drives it.
type jobRuntime interface {
	// Enqueuer is what the app's handlers get.
	jobs.Enqueuer
	// Start starts the workers (the PostgreSQL runtime first creates its
	// tables in the background).
	Start(ctx context.Context) error
	// Stop drains within ctx's deadline and reports what it abandoned.
	Stop(ctx context.Context) (jobs.StopReport, error)
}

// jobsConfig maps the spec's jobs block onto the runtime's config.
func jobsConfig(c config.Jobs) jobs.Config {
	return jobs.Config{
		Workers: c.Workers,
		Tenants: jobs.TenantConfig{
			MaxConcurrent:  c.Tenants.MaxConcurrent,
			Lanes:          c.Tenants.Lanes,
			LanesPerTenant: c.Tenants.LanesPerTenant,
		},
		ShutdownTimeout: c.ShutdownTimeout.D(),
	}.WithDefaults()
}

// newJobs builds the runtime the spec asks for, with the app's workers.
func newJobs(ctx context.Context, cfg config.Config, set *shards.Set, w *jobs.Workers, srv *runtime.Server, log *slog.Logger) (jobRuntime, error) {
	opts := jobs.Options{Logger: log, Registry: srv.Registry()}
	switch cfg.Jobs.Backend {
	case "local":
		c, err := jobs.NewClient(ctx, jobsConfig(cfg.Jobs), local.New(), w, opts)
		if err != nil {
			return nil, err
		}
		// The in-memory runtime: fair tenant order, slots and lanes, but no
		// durability, so its EnqueueTx answers jobs.ErrNoTxEnqueue.
		return c, nil
	case "postgres":
		rt, err := pgjobs.NewRuntime(ctx, set, pgjobs.FromConfig(cfg.Jobs.Postgres), jobsConfig(cfg.Jobs), w, opts)
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		srv.AddReadiness("jobs", func(context.Context) error {
			if pending := rt.NotReady(); len(pending) > 0 {
				return fmt.Errorf("jobs tables still being created on %v", pending)
			}
			return nil
		})
		return rt, nil
	}
	return nil, fmt.Errorf("jobs.backend: unknown backend %q", cfg.Jobs.Backend)
}
