package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/app"
	"github.com/cellgate/cellgate/gen"
	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/settings"
	"github.com/cellgate/cellgate/internal/buildinfo"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/telemetry"
)

// serve runs the cell until ctx is cancelled (SIGTERM), then drains.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// Tracing comes from the OTEL_* variables alone; off when they are
	// unset. The console exporter writes to stdout, the logs to stderr.
	tracing, err := telemetry.FromEnv(ctx, os.Getenv, os.Stdout, cellServiceName(cfg))
	if err != nil {
		return err
	}
	defer tracing.Close(log)
	access, err := runtime.AccessLogFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	traceTenant, err := telemetry.TraceTenantFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	var openOpts shards.OpenOptions
	if tracing.Enabled {
		openOpts.Tracer = tracing.Provider
	}
	set, err := shards.OpenCellWith(ctx, cfg.Database, cfg.Cells, cfg.Server.Cell, os.Getenv, openOpts)
	if err != nil {
		return err
	}
	defer set.Close()

	// The console's top tenants hear every tenant-bulkhead refusal, and
	// its per-tenant limit counts every plan refusal and shadow refusal.
	rejections := console.NewTopK(64)
	limited := console.NewLimitCounts(256)
	// Tenants' plans and overrides (docs/plans.md): the store starts with
	// every tenant on the default plan and follows the control database's
	// tenant table once its migrations are applied.
	var tenants *plans.Store
	if cfg.Tenancy.Enabled {
		cat, err := plans.NewCatalog(cfg)
		if err != nil {
			return err
		}
		tenants = plans.NewStore(set.Control(), cat, plans.Options{Log: log})
	}
	// The shard map (docs/cells.md): the set serves database.shards' map
	// until the watcher has read the control database's record, then
	// every version written there, live.
	boot, err := shardmap.FromConfig(cfg.Database)
	if err != nil {
		return err
	}
	shardMap, err := shardmap.NewWatcher(set.Control(), set, shardmap.Options{Boot: boot, Log: log})
	if err != nil {
		return err
	}
	// Each tenant request's handler gets the accessor to its tenant's
	// shard, with the request's database permits.
	srv, err := runtime.New(cfg, runtime.Options{
		Logger: log, Getenv: os.Getenv, OnTenantRejection: rejections.Add, OnTenantLimit: limited.Add, Shards: set,
		Tracing: tracing, TraceTenant: traceTenant, AccessLog: &access, Plans: tenants,
	})
	if err != nil {
		return err
	}
	if err := srv.Registry().Register(shards.NewPoolCollector(set)); err != nil {
		return fmt.Errorf("pool metrics: %w", err)
	}
	if err := srv.Registry().Register(tracing.DroppedCollector()); err != nil {
		return fmt.Errorf("trace metrics: %w", err)
	}
	if err := srv.Registry().Register(buildinfo.NewCollector()); err != nil {
		return fmt.Errorf("build info metric: %w", err)
	}
	if err := shardMap.Register(srv.Registry()); err != nil {
		return fmt.Errorf("shard map metrics: %w", err)
	}
	srv.AddReadiness("shard_map", shardMap.Ready)
	srv.AddReadinessDetail("shard_map", shardMap.Problem)

	workers := jobs.NewWorkers()
	jobkinds.RegisterWorkers(workers, set, app.NewWorkers(app.WorkerDeps{Log: log}))
	// The cell listens at once so /healthz answers while migrations run;
	// /readyz turns ready when the databases answer and are migrated, and
	// names the database, the file and PostgreSQL's error when a migration
	// failed.
	progress := &migrationProgress{}
	jobsRT, jobsDBs, err := newJobs(ctx, cfg, set, workers, srv, progress.applied, log, tracing, traceTenant, tenants)
	if err != nil {
		return err
	}
	// The app's own extensions: its settings (schema/settings.cue, as
	// this cell runs them), its metrics in the server's registry, its
	// middleware around the spec's routes.
	st, err := settings.From(cfg)
	if err != nil {
		return err
	}
	a, err := app.New(app.Deps{Jobs: jobsRT, Log: log, Settings: st, Metrics: srv.Registry()})
	if err != nil {
		return err
	}
	if err := api.Register(srv, a, a.Middleware()); err != nil {
		return err
	}
	serveOpenAPI(srv)
	cons, err := mountConsole(cfg, srv, set, jobsRT, jobsDBs, consoleFeeds{rejections, limited, tenants}, log)
	if err != nil {
		return err
	}
	if cons != nil {
		// The console's sampler and its background counts are ours: they
		// stop, and are waited for, before serve returns (and before the
		// databases close).
		defer cons.Close()
		sctx, stopSampler := context.WithCancel(ctx)
		var sampling sync.WaitGroup
		sampling.Go(func() { cons.RunSampler(sctx) })
		defer sampling.Wait()
		defer stopSampler()
	}
	srv.AddReadiness("migrations", progress.check)
	// The shard map's watcher follows the control database once the
	// migrations are in place, and stops (deleting its heartbeat row)
	// before the pools close.
	mapCtx, stopMap := context.WithCancel(ctx)
	mapDone := make(chan struct{})
	go func() {
		defer close(mapDone)
		for !progress.applied() {
			if sleepCtx(mapCtx, 50*time.Millisecond) != nil {
				return
			}
		}
		_ = shardMap.Run(mapCtx)
	}()
	defer func() { stopMap(); <-mapDone }()
	bm, err := newBootMetrics(srv.Registry())
	if err != nil {
		return err
	}
	bm.readiness(set, func(name string, check func(context.Context) error) { srv.AddReadiness(name, check) })
	go func() {
		// The job runtime applies its own migrations as it starts; the
		// app's must be in place first, since workers use its tables.
		if err := progress.run(ctx, migrationTargets(cfg, set, schemaApp, schemaTenants, schemaIdempotency, schemaShardMap), log, sleepCtx); err != nil {
			if ctx.Err() == nil {
				bm.migrationsFailed.Set(1) // final: a failed file is not retried
			}
			return
		}
		bm.migrationsApplied.Set(1)
		if k := srv.Idempotency(); k != nil {
			// Every process sweeps expired idempotency keys; concurrent
			// sweeps skip each other's rows.
			go k.RunSweeper(ctx, set.Shards(), cfg.Server.Idempotency.SweepInterval.D())
		}
		if tenants != nil {
			go func() { _ = tenants.Run(ctx) }()
		}
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

// cellServiceName is the cell's service.name when OTEL_SERVICE_NAME is
// unset: the spec's service name.
func cellServiceName(cfg config.Config) string { return cfg.Service.Name }

// serveOpenAPI serves the generated OpenAPI documents (public, never
// counted): /openapi.json (3.1) and /openapi-3.0.json (3.0.3).
func serveOpenAPI(srv *runtime.Server) {
	for path, doc := range map[string][]byte{"/openapi.json": gen.OpenAPI, "/openapi-3.0.json": gen.OpenAPI30} {
		srv.Public(http.MethodGet, path, func(c echo.Context) error {
			return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
		})
	}
}
