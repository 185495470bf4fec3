// Command router runs the cell router: a stateless reverse proxy that sends
// each tenant's requests to its cell (see internal/cells and docs/cells.md).
//
//	router [-config cell.json] [-addr :8090] [-slotmap deploy/slotmap.json] [flags]
//
// The router loads the same config as the cells (the spec's generated
// defaults + the optional JSON file from -config or $CELLGATE_CONFIG + the
// environment for tenancy keys), so it extracts tenants exactly as they
// do. Without -slotmap it routes with the spec's cells and never reloads.
// Run as many copies as you like behind a load balancer. With a token in
// the variable router.admin_token_env names (default
// CELLGATE_ROUTER_ADMIN_TOKEN), the router serves its own console at
// /admin/ (internal/routerconsole); without one, /admin/ goes to the cells.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/buildinfo"
	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/configload"
	"github.com/cellgate/cellgate/internal/routerconsole"
	"github.com/cellgate/cellgate/internal/telemetry"
)

// routerGCPercent is the router's GC target when $GOGC is unset. A router
// keeps almost nothing live (a slot map, pooled connections and buffers)
// but allocates a few KiB per request, so with the default of 100 it
// collects every few thousand requests; at 400 it collects a quarter as
// often for a few MiB more heap, about a tenth less CPU per request
// (BenchmarkRouterOverhead).
const routerGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(routerGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	level, lerr := telemetry.ParseLevel("CELLGATE_LOG_LEVEL", os.Getenv("CELLGATE_LOG_LEVEL"))
	// Every line logged with a traced context carries its trace id.
	log := slog.New(telemetry.LogHandler{Handler: slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})})
	err := lerr
	if err == nil {
		err = run(ctx, os.Args[1:], log)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the flag package has printed the usage
		}
		log.Error("exit", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	d := router.DefaultProxyConfig
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	path := fs.String("config", os.Getenv("CELLGATE_CONFIG"), "JSON config file applied over the spec's defaults (the cells' file works)")
	addr := fs.String("addr", envOr("CELLGATE_ROUTER_ADDRESS", ":8090"), "listen address ($CELLGATE_ROUTER_ADDRESS)")
	slotMap := fs.String("slotmap", os.Getenv("CELLGATE_SLOTMAP"), "slot map file, reloaded on change ($CELLGATE_SLOTMAP); empty: the spec's cells")
	reload := fs.Duration("reload", router.DefaultReloadInterval, "how often the slot map file is checked for changes")
	hInterval := fs.Duration("health-interval", d.HealthInterval, "time between health checks of a cell")
	hTimeout := fs.Duration("health-timeout", d.HealthTimeout, "timeout of one health check")
	failAfter := fs.Int("fail-after", d.FailAfter, "consecutive failed checks or transport errors that mark a cell down")
	maxInFlight := fs.Int("max-in-flight", 0, "requests in flight per cell before 503 (-1: no cap; 0: the spec's router.max_in_flight_per_cell)")
	maxPerTenant := fs.Int("max-in-flight-per-tenant", 0, "requests in flight per tenant before 503, checked before the per-cell cap (-1: no cap; 0: the spec's router.max_in_flight_per_tenant)")
	bodyTimeout := fs.Duration("body-timeout", 0, "longest a request body may take to arrive (0: the spec's router.body_timeout)")
	headerTimeout := fs.Duration("response-header-timeout", d.ResponseHeaderTimeout, "longest wait for a cell's response head")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg, err := configload.LoadMode(ctx, configload.Spec, spec.Config(), *path, nil, log)
	if err != nil {
		return err
	}
	// Tracing comes from the OTEL_* variables alone; off when they are
	// unset.
	tracing, err := telemetry.FromEnv(ctx, os.Getenv, os.Stdout, cfg.Service.Name+"-router")
	if err != nil {
		return err
	}
	defer tracing.Close(log)
	traceTenant, err := telemetry.TraceTenantFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	// The access log takes the cells' variables (CELLGATE_ACCESS_LOG,
	// CELLGATE_ACCESS_LOG_SAMPLE).
	access, err := telemetry.AccessLogFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	// The registry is made here so the console's counter joins the
	// router's /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.NewCollector(), tracing.DroppedCollector())
	// console.oidc is checked only when the router has a console: a
	// router without one needs no client secret.
	oidc, err := routerconsole.OIDCFromSpec(cfg.Console.OIDC, os.Getenv)
	if err != nil && cfg.Router.AdminTokenEnv != "" && os.Getenv(cfg.Router.AdminTokenEnv) != "" {
		return err
	}
	return router.Run(ctx, cfg, router.Options{
		Address:        *addr,
		Registry:       reg,
		SlotMapFile:    *slotMap,
		ReloadInterval: *reload,
		Logger:         log,
		Console: consoleHook(cfg.Router.AdminTokenEnv, routerconsole.Config{
			SlotMapFile: *slotMap, Logger: log, Registry: reg,
			SessionTTL: cfg.Console.SessionTTL.D(), SessionIdle: cfg.Console.SessionIdle.D(),
			TrustedProxies: cfg.Console.TrustedProxies, SecureCookies: cfg.Console.SecureCookies,
			OIDC: oidc,
		}),
		Proxy: router.ProxyConfig{
			AccessLog:             &access,
			HealthInterval:        *hInterval,
			HealthTimeout:         *hTimeout,
			FailAfter:             *failAfter,
			MaxInFlightPerCell:    *maxInFlight,
			MaxInFlightPerTenant:  *maxPerTenant,
			BodyTimeout:           *bodyTimeout,
			ResponseHeaderTimeout: *headerTimeout,
			Tracing:               tracing,
			TraceTenant:           traceTenant,
		},
	})
}

// consoleHook returns the hook that builds the router's console when the
// variable router.admin_token_env names holds a token, else nil: then the
// router has no console and forwards /admin/ to the cells as before.
//
// base holds the console's settings from the spec; the hook adds the token
// and the proxy.
func consoleHook(tokenEnv string, base routerconsole.Config) func(*router.Proxy) (http.Handler, func(context.Context), error) {
	token := ""
	if tokenEnv != "" {
		token = os.Getenv(tokenEnv)
	}
	if token == "" {
		return nil
	}
	return func(p *router.Proxy) (http.Handler, func(context.Context), error) {
		cc := base
		cc.AdminToken, cc.AdminTokenEnv, cc.Source = token, tokenEnv, p
		c, err := routerconsole.New(cc)
		if err != nil {
			return nil, nil, err
		}
		base.Logger.Info("router console on", "path", routerconsole.Prefix, "token_env", tokenEnv)
		return c, c.Run, nil
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
