package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/local"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/telemetry"
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

// jobLimits is the source of per-tenant job caps and weights both job
// backends read: the tenants' plans and overrides when the cell has a
// tenant store (tenancy on), else the spec's uniform
// jobs.tenants.max_concurrent with weight 1.
func jobLimits(c config.Jobs, tenants *plans.Store) jobs.TenantLimits {
	if tenants != nil {
		return tenants
	}
	return jobs.UniformLimits{MaxRunning: c.Tenants.MaxConcurrent}
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
//
// Every job is observed (jobs.Observe): its duration and wait histograms,
// and with tracing on, the enqueue and job spans, the enqueuing span's
// context stored with the job.
func newJobs(ctx context.Context, cfg config.Config, set *shards.Set, w *jobs.Workers, srv *runtime.Server, appMigrated func() bool, log *slog.Logger, tr *telemetry.Tracing, traceTenant bool, tenants *plans.Store) (*jobs.Client, []*pgjobs.DB, error) {
	ocfg := jobs.ObserveConfig{Propagator: tr.Propagator, TraceTenant: traceTenant, Registerer: srv.Registry()}
	if tr.Enabled {
		ocfg.Tracer = tr.Provider
	}
	ins, work, err := jobs.Observe(ocfg)
	if err != nil {
		return nil, nil, fmt.Errorf("jobs metrics: %w", err)
	}
	// A job of a tenant whose slot is frozen for a move between shards
	// snoozes instead of running (internal/shardmap).
	opts := jobs.Options{Logger: log, Registry: srv.Registry(), Middleware: []jobs.Middleware{work, shardmap.JobMiddleware(set, time.Second)}}
	if ins != nil {
		opts.InsertMiddleware = []jobs.InsertMiddleware{ins}
	}
	jcfg := jobsConfig(cfg.Jobs)
	switch cfg.Jobs.Backend {
	case "local":
		// The in-memory backend: fair tenant order, slots and lanes, but no
		// durability, so its EnqueueTx answers jobs.ErrNoTxEnqueue.
		c, err := jobs.NewClient(ctx, jcfg, local.New(local.WithLimits(jobLimits(cfg.Jobs, tenants))), w, opts)
		return c, nil, err
	case "postgres":
		b, err := pgjobs.New(set, pgjobs.FromConfig(cfg.Jobs.Postgres), pgjobs.Options{Logger: log, Registry: srv.Registry(), Limits: jobLimits(cfg.Jobs, tenants), TraceContext: tr.Enabled})
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
