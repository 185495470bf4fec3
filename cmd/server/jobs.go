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
		Periodic:        periodicJobs(c.Periodic),
	}.WithDefaults()
}

// periodicJobs maps jobs.periodic onto the runtime's entries.
func periodicJobs(ps []config.PeriodicJob) []jobs.PeriodicJob {
	out := make([]jobs.PeriodicJob, len(ps))
	for i, p := range ps {
		out[i] = jobs.PeriodicJob{
			Name: p.Name, Kind: p.Kind, Args: p.Args, Every: p.Every.D(), Cron: p.Cron,
			TimeZone: p.TimeZone, RunOnStart: p.RunOnStart, CatchUp: jobs.CatchUp(p.CatchUp),
		}
	}
	return out
}

// newJobs builds the job client the spec asks for, with the app's
// workers, and returns the jobs databases the console shows (none for the
// local backend). appMigrated reports whether the app's migrations are in
// place: the client is started only after them, and the PostgreSQL
// backend creates its tables when its workers first claim.
func newJobs(ctx context.Context, cfg config.Config, set *shards.Set, w *jobs.Workers, srv *runtime.Server, appMigrated func() bool, log *slog.Logger) (*jobs.Client, []*pgjobs.DB, error) {
	opts := jobs.Options{Logger: log, Registry: srv.Registry()}
	jcfg := jobsConfig(cfg.Jobs)
	switch cfg.Jobs.Backend {
	case "local":
		// The in-memory backend: fair tenant order, slots and lanes, but no
		// durability, so its EnqueueTx answers jobs.ErrNoTxEnqueue.
		c, err := jobs.NewClient(ctx, jcfg, local.New(), w, opts)
		return c, nil, err
	case "postgres":
		b, err := pgjobs.New(set, pgjobs.FromConfig(cfg.Jobs.Postgres), pgjobs.Options{Logger: log, Registry: srv.Registry()})
		if err != nil {
			return nil, nil, fmt.Errorf("jobs: %w", err)
		}
		srv.AddReadiness("jobs", func(context.Context) error {
			return jobsReadiness(appMigrated(), b.NotReady(), b.MigrationFailures())
		})
		// jobs.workers counts per database.
		jcfg.Workers *= len(b.Databases())
		c, err := jobs.NewClient(ctx, jcfg, b, w, opts)
		return c, b.Databases(), err
	}
	return nil, nil, fmt.Errorf("jobs.backend: unknown backend %q", cfg.Jobs.Backend)
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
