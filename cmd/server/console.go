package main

import (
	"log/slog"
	"os"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// consoleFeeds are what the cell's runtime feeds the console: the most
// refused tenants, the per-tenant limit counts and the tenant table's store
// (nil with tenancy off).
type consoleFeeds struct {
	rejections *console.TopK
	limited    *console.LimitCounts
	tenants    *plans.Store
}

// mountConsole adds the operator console (/admin/ and /admin/api/) when the
// admin token is set; without it those paths answer 404. The console sees
// the PostgreSQL backend's databases, dbs, through console.Database, so the
// runtime package never links the job backend.
//
// It returns the console (nil when off): the caller owns its sampler
// (Console.RunSampler) and stops it.
//
// Its sessions live in the control database (console.PGSessions), so a
// logout or a token change ends a session in every process of the cell.
func mountConsole(cfg config.Config, srv *runtime.Server, set *shards.Set, client *jobs.Client, dbs []*pgjobs.DB, feeds consoleFeeds, log *slog.Logger) (*console.Console, error) {
	admin := os.Getenv(cfg.Server.AdminTokenEnv)
	if cfg.Server.AdminTokenEnv == "" || admin == "" {
		return nil, nil
	}
	operator := ""
	if cfg.Server.OperatorTokenEnv != "" {
		operator = os.Getenv(cfg.Server.OperatorTokenEnv)
	}
	oidc, err := consoleauth.OIDCFromSpec(cfg.Console.OIDC, os.Getenv)
	if err != nil {
		return nil, err
	}
	var databases []console.Database
	for _, db := range dbs {
		databases = append(databases, db)
	}
	// In flight per tenant: a lock-free read of the request engine's
	// account (admission.Engine.InFlightOf), nothing on the admit path.
	var inFlight func(string) (int64, int64)
	if eng := srv.Bulkheads().Requests; eng != nil {
		limit := eng.Config().MaxConcurrent
		inFlight = func(tenant string) (int64, int64) { return eng.InFlightOf(tenant), limit }
	}
	c, err := console.New(console.Config{
		AdminToken:       admin,
		OperatorToken:    operator,
		AdminTokenEnv:    cfg.Server.AdminTokenEnv,
		OperatorTokenEnv: cfg.Server.OperatorTokenEnv,
		Sessions:         console.NewPGSessions(set.Control(), set.ControlDSN(), cfg.Console.SessionIdle.D()),
		SessionTTL:       cfg.Console.SessionTTL.D(),
		SessionIdle:      cfg.Console.SessionIdle.D(),
		TrustedProxies:   cfg.Console.TrustedProxies,
		SecureCookies:    cfg.Console.SecureCookies,
		OIDC:             oidc,
		Registry:         srv.Registry(),
		Databases:        databases,
		Spec:             cfg,
		ShardMap: func() console.ShardMap {
			r := set.Routing()
			return console.ShardMap{Version: r.Version(), Owner: r.Shard, Frozen: r.FrozenRanges()}
		},
		Admission:   func() any { return srv.Bulkheads().Report() },
		Rejections:  feeds.rejections,
		LimitCounts: feeds.limited,
		Plans:       feeds.tenants,
		InFlight:    inFlight,
		Workers:     client.WorkerJobs,
		Completed:   client.Completed,
		Logger:      log,
	})
	if err != nil {
		return nil, err
	}
	c.Register(srv.Echo())
	return c, nil
}
