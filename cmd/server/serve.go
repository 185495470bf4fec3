package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	cgsql "github.com/cellgate/cellgate/sql"

	"github.com/cellgate/cellgate/app"
	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// serve runs the cell until ctx is cancelled (SIGTERM), then drains.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	set, err := shards.OpenCell(ctx, cfg.Database, cfg.Cells, cfg.Server.Cell, os.Getenv)
	if err != nil {
		return err
	}
	defer set.Close()

	srv, err := runtime.New(cfg, runtime.Options{Logger: log, Getenv: os.Getenv})
	if err != nil {
		return err
	}
	// Handlers' checkouts take the per-tenant database permits the tenant
	// middleware binds to each request.
	set.UsePermits(runtime.ShardPermits)

	workers := jobs.NewWorkers()
	jobkinds.RegisterWorkers(workers, app.NewWorkers(app.WorkerDeps{Shards: set, Log: log}))
	jobsRT, err := newJobs(ctx, cfg, set, workers, srv, log)
	if err != nil {
		return err
	}
	api.Register(srv, app.New(app.Deps{Shards: set, Jobs: jobsRT, Log: log}))

	// The cell listens at once so /healthz answers while migrations run;
	// /readyz turns ready when the databases answer and are migrated.
	var migrated atomic.Bool
	srv.AddReadiness("migrations", func(context.Context) error {
		if !migrated.Load() {
			return errors.New("migrations are still running")
		}
		return nil
	})
	srv.AddReadiness("databases", set.Ping)
	go func() {
		if err := migrateWithRetry(ctx, set, log); err != nil {
			return
		}
		migrated.Store(true)
		if err := jobsRT.Start(ctx); err != nil {
			log.Error("jobs did not start", "error", err.Error())
		}
	}()

	runErr := srv.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Jobs.ShutdownTimeout.D())
	defer cancel()
	if rep, err := jobsRT.Stop(sctx); err != nil || len(rep.Abandoned) > 0 {
		log.Warn("jobs stopped", "abandoned", len(rep.Abandoned), "waiting", rep.Waiting, "error", fmt.Sprint(err))
	}
	return runErr
}

// migrateWithRetry applies the app's migrations (not the job backend's:
// its runtime applies those) to control, then every shard,
// retrying with backoff while a database is down, until ctx ends.
func migrateWithRetry(ctx context.Context, set *shards.Set, log *slog.Logger) error {
	delay := 200 * time.Millisecond
	for {
		err := migrateSet(ctx, set)
		if err == nil {
			log.Info("migrations applied", "shards", len(set.Shards()))
			return nil
		}
		log.Warn("migrations failed; retrying", "error", err.Error(), "in", delay.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func migrateSet(ctx context.Context, set *shards.Set) error {
	if err := cgsql.Migrate(ctx, set.ControlDSN()); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	for _, sh := range set.Shards() {
		if err := cgsql.Migrate(ctx, sh.DSN); err != nil {
			return fmt.Errorf("%s: %w", sh.Name, err)
		}
	}
	return nil
}

// migrateAll is the `migrate` subcommand: the app's migrations, as serve
// applies them, and, with jobs.backend = "postgres", the job backend's on
// the databases its runtime would use (serve leaves those to the runtime,
// which migrates them as it starts).
func migrateAll(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	set, err := shards.OpenCell(ctx, cfg.Database, cfg.Cells, cfg.Server.Cell, os.Getenv)
	if err != nil {
		return err
	}
	defer set.Close()
	if err := migrateSet(ctx, set); err != nil {
		return err
	}
	if cfg.Jobs.Backend == "postgres" {
		if err := pgjobs.Migrate(ctx, set.ControlDSN()); err != nil {
			return fmt.Errorf("control: jobs: %w", err)
		}
		if cfg.Jobs.Postgres.ShardLocal {
			for _, sh := range set.Shards() {
				if err := pgjobs.Migrate(ctx, sh.DSN); err != nil {
					return fmt.Errorf("%s: jobs: %w", sh.Name, err)
				}
			}
		}
	}
	log.Info("migrations applied", "shards", len(set.Shards()))
	return nil
}
