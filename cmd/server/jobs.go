package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

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
// appMigrated reports whether the app's migrations are in place: the
// PostgreSQL runtime starts (and creates its tables) only after them.
func newJobs(ctx context.Context, cfg config.Config, set *shards.Set, w *jobs.Workers, srv *runtime.Server, appMigrated func() bool, log *slog.Logger) (jobRuntime, error) {
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
			return jobsReadiness(appMigrated(), rt.NotReady(), rt.MigrationFailures())
		})
		return rt, nil
	}
	return nil, fmt.Errorf("jobs.backend: unknown backend %q", cfg.Jobs.Backend)
}

// jobsReadiness is the PostgreSQL runtime's readiness: not started while
// the app's migrations are not in place, failed where its own migrations
// failed in a database (with the repair), else pending where its tables
// are still being created. notReady and failures are the runtime's
// NotReady and MigrationFailures.
func jobsReadiness(appMigrated bool, notReady []string, failures map[string]error) error {
	if !appMigrated {
		return errors.New("not started: the job runtime starts once the app's migrations are applied (see the migrations check)")
	}
	var msgs, pending []string
	for _, db := range notReady {
		if err, ok := failures[db]; ok {
			msgs = append(msgs, describeFailure(migrationTarget{db: db, schema: schemaJobs}, err))
		} else {
			pending = append(pending, db)
		}
	}
	if len(pending) > 0 {
		msgs = append(msgs, fmt.Sprintf("jobs tables still being created on %v", pending))
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}
