package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/probe"
	"github.com/cellgate/cellgate/internal/tenancy"
)

// Options are the router process's settings that the spec does not
// hold. Zero fields take the defaults named on each.
type Options struct {
	// Address is the listen address. Default: ":8090".
	Address string
	// Listener, when set, is served instead of listening on Address (tests
	// pass one on port 0).
	Listener net.Listener
	// SlotMapFile is the slot map file (see cells.SlotMap) the router loads at
	// start and reloads when it changes. Empty: the spec's cells, fixed.
	SlotMapFile string
	// ReloadInterval is how often the slot map file is checked for a
	// change. Default: 100ms (reading a small file ten times a second is
	// nothing; a slot move's freeze waits for every router to reload).
	ReloadInterval time.Duration
	// Proxy configures the request path and health checks. Its caps, body
	// deadlines, tenant header and engine layout, when zero, come from the
	// spec (router, tenancy and admission blocks).
	Proxy ProxyConfig
	// Logger is the structured logger. Default: slog.Default().
	Logger *slog.Logger
	// Registry receives the router's metrics and is served on /metrics.
	// Default: a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Getenv reads the tenancy keys the spec names (session or JWT).
	// Default: os.Getenv.
	Getenv func(string) string
	// Ready, when set, is called with the listening address once the
	// router serves.
	Ready func(net.Addr)
	// Console, when set, builds the router's own console once the proxy
	// exists (cmd/router sets it when router.admin_token_env names a set
	// variable). Its handler then answers /admin and every path below it
	// instead of the cells: without a tenant, /admin/ would go to any cell
	// that is up, so an operator could never tell which cell's console
	// answered; the router's console links to each cell's own. run, when
	// not nil, runs in the router's wait group until the router stops.
	// Without a Console, /admin/ is forwarded like any other path.
	Console func(p *Proxy) (handler http.Handler, run func(context.Context), err error)
}

// AdminPath is the path the router's console answers (and every path
// below it) when Options.Console is set.
const AdminPath = "/admin"

// DefaultReloadInterval is how often the slot map file is read by default.
const DefaultReloadInterval = 100 * time.Millisecond

// isAdmin reports whether path is AdminPath or below it.
func isAdmin(path string) bool {
	return strings.HasPrefix(path, AdminPath) && (len(path) == len(AdminPath) || path[len(AdminPath)] == '/')
}

// Run runs the cell router until ctx ends, then drains within
// cfg.Server.ShutdownTimeout. cfg is the same final config the cells run
// with (spec defaults + overlay + env): the router extracts tenants with
// its tenancy block and, without a slot map file, routes with its cells.
// The router serves its own /healthz, /readyz and /metrics; every other
// path is proxied. It serves with net/http's server on an
// httpguard.Listener, whose head scan and head deadline are the cells'.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	if opts.Address == "" {
		opts.Address = ":8090"
	}
	if opts.ReloadInterval == 0 {
		opts.ReloadInterval = DefaultReloadInterval
	}
	if opts.ReloadInterval < 0 {
		return fmt.Errorf("cells: Options.ReloadInterval must be > 0, got %s", opts.ReloadInterval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	opts.Proxy = fromSpec(opts.Proxy, cfg)
	if opts.Proxy.Logger == nil {
		opts.Proxy.Logger = opts.Logger
	}
	log := opts.Logger

	x, err := Extractor(cfg.Tenancy, opts.Getenv, opts.Registry, log)
	if err != nil {
		return err
	}
	if c, ok := x.(io.Closer); ok {
		// A JWKS URL key set refreshes in the background until closed.
		defer c.Close()
	}
	var router *cells.CellRouter
	var watch *fileWatch
	if opts.SlotMapFile != "" {
		raw, err := os.ReadFile(opts.SlotMapFile)
		if err != nil {
			return fmt.Errorf("cells: slot map: %w", err)
		}
		if _, router, err = cells.ParseSlotMap(raw); err != nil {
			return fmt.Errorf("%w (file %s)", err, opts.SlotMapFile)
		}
		watch = &fileWatch{path: opts.SlotMapFile, last: raw}
	} else if router, err = cells.New(cells.SpecsFromConfig(cfg.Cells)); err != nil {
		return fmt.Errorf("cells: %w", err)
	}
	p, err := NewProxy(opts.Proxy, x, router, opts.Registry)
	if err != nil {
		return err
	}
	defer p.Close()
	var admin http.Handler
	var adminRun func(context.Context)
	if opts.Console != nil {
		if admin, adminRun, err = opts.Console(p); err != nil {
			return err
		}
	}

	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.Address); err != nil {
			return fmt.Errorf("router address %q: %w", opts.Address, err)
		}
	}
	ln = httpguard.Listener{Listener: ln, HeaderTimeout: cfg.Server.ReadHeaderTimeout.D()}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // runs after stop: the watcher ends with runCtx
	defer stop()
	p.Start(runCtx)
	if watch != nil {
		wg.Go(func() { watch.run(runCtx, p, opts.ReloadInterval, log) })
	}
	if adminRun != nil {
		wg.Go(func() { adminRun(runCtx) })
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET "+probe.Health, func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = jsonContentType
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET "+probe.Ready, p.ServeReady)
	mux.Handle("GET "+probe.Metrics, promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}))
	srv := &http.Server{
		Handler:           probes(mux, p, admin),
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout.D(),
		IdleTimeout:       cfg.Server.IdleTimeout.D(),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	httpguard.Install(srv)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("router listening", "address", ln.Addr().String(), "cells", router.Len(), "slot_map", opts.SlotMapFile)
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop()
	timeout := cfg.Server.ShutdownTimeout.D()
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	log.Info("router shutting down", "deadline", timeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("router shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// fromSpec fills the fields of pc left zero from the spec's router,
// admission and tenancy blocks (a field set, by a flag, wins). The spec
// says "no cap" and "none" with 0, ProxyConfig with -1.
func fromSpec(pc ProxyConfig, cfg config.Config) ProxyConfig {
	r := cfg.Router
	orNone := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	if pc.MaxInFlightPerCell == 0 {
		pc.MaxInFlightPerCell = int(orNone(int64(r.MaxInFlightPerCell)))
	}
	if pc.MaxInFlightPerTenant == 0 {
		pc.MaxInFlightPerTenant = int(orNone(int64(r.MaxInFlightPerTenant)))
		if c := pc.MaxInFlightPerCell; c > 0 && pc.MaxInFlightPerTenant > c {
			pc.MaxInFlightPerTenant = c // a lower per-cell cap (a flag) lowers the spec's tenant cap with it
		}
	}
	if pc.BodyTimeout == 0 {
		pc.BodyTimeout = time.Duration(orNone(int64(r.BodyTimeout.D())))
	}
	if pc.MinBodyRate == 0 {
		pc.MinBodyRate = orNone(r.MinBodyBytesPerSecond)
	}
	if pc.BodyRateGrace == 0 {
		pc.BodyRateGrace = r.BodyRateGrace.D()
	}
	if pc.TenantHeader == "" {
		pc.TenantHeader = cfg.Tenancy.Header.Name
	}
	if pc.Admission == (admission.Config{}) {
		// The cells' engine layout and account bounds (as the runtime's
		// engineConfig reads them); the router's engine counts concurrency only.
		a, c := cfg.Admission, admission.DefaultConfig()
		if a.Shards > 0 {
			c.Shards = a.Shards
		}
		if a.MaxAccounts > 0 {
			c.MaxAccounts = a.MaxAccounts
		}
		if a.IdleAfter > 0 {
			c.IdleAfter = a.IdleAfter.D()
		}
		pc.Admission = c
	}
	return pc
}

// probes sends the router's own probe paths to mux, /admin to admin when
// the console is on, and everything else to the proxy; every request
// passes the edge's rules first, its own paths' too.
func probes(mux *http.ServeMux, p *Proxy, admin http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case probe.Is(r.URL.Path):
			if !p.refused(w, r) {
				mux.ServeHTTP(w, r)
			}
		case admin != nil && isAdmin(r.URL.Path):
			if !p.refused(w, r) {
				admin.ServeHTTP(w, r)
			}
		default:
			p.ServeHTTP(w, r) // the same rules, first
		}
	})
}

// jsonContentType is shared by reference, never modified.
var jsonContentType = []string{"application/json"}

// Extractor builds the tenant extractor for the spec's tenancy block, the
// same way the cells build their middleware; nil when tenancy is off. A
// JWKS URL key set reports its fetches in reg (nil: not at all) and log;
// the caller closes an extractor that is an io.Closer.
func Extractor(t config.Tenancy, getenv func(string) string, reg prometheus.Registerer, log *slog.Logger) (tenancy.Extractor, error) {
	if !t.Enabled {
		return nil, nil
	}
	tc, err := tenancy.FromSpec(t, getenv)
	if err != nil {
		return nil, err
	}
	tc.Registerer, tc.Logger = reg, log
	x, err := tenancy.NewExtractor(tc)
	if err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	return x, nil
}

// ServeReady answers the router's readiness: 200 with each cell's state.
// The router is ready whenever it has a map, even with cells down: a
// router that refuses one cell's tenants still serves the others', and
// taking it out of a load balancer would refuse everyone.
//
// It also says which slot map is in use (slot_map_digest: the hex SHA-256
// of its canonical form, cells.CellRouter.Digest; slot_map_generation) and
// how many forwarded requests routed by a replaced map are still in flight
// (requests_on_older_maps): a slot move waits until every router reports
// the frozen map's digest and none of those, instead of sleeping a guess.
func (p *Proxy) ServeReady(w http.ResponseWriter, _ *http.Request) {
	t := p.table.Load()
	cells := make(map[string]string, len(t.backends))
	for _, b := range t.backends {
		cells[b.name] = "down"
		if b.up.Load() {
			cells[b.name] = "up"
		}
	}
	w.Header()["Content-Type"] = jsonContentType
	_ = json.NewEncoder(w).Encode(map[string]any{
		"status":                 "ready",
		"cells":                  cells,
		"slot_map_current":       p.m.slotMapCurrent.Load(),
		"slot_map_digest":        t.digest,
		"slot_map_generation":    t.gen,
		"requests_on_older_maps": p.olderInFlight(),
	})
}

// fileWatch polls the slot map file. Polling (not inotify) works the same
// on every file system, including the symlink swaps of Kubernetes config
// maps, and a map file is small enough to read whole every interval.
type fileWatch struct {
	path string
	last []byte // the content last seen, good or bad; nil after a failed read
}

func (f *fileWatch) run(ctx context.Context, p *Proxy, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.poll(p, log)
	}
}

// poll reloads the file if its content changed. A map that does not parse
// or build is logged and counted, and the last good map stays in use.
func (f *fileWatch) poll(p *Proxy, log *slog.Logger) {
	raw, err := os.ReadFile(f.path)
	if err != nil {
		p.m.reloadFailed.Add(1)
		p.m.slotMapCurrent.Store(false)
		if f.last != nil {
			// The first failure in a row: one entry in the history, where
			// one per poll would push every real reload out of it.
			p.noteReload("unreadable", err)
		}
		// Forget the content: the file that comes back must be loaded
		// even with the same bytes, or the map would stay "not current".
		f.last = nil
		log.Error("slot map file unreadable; keeping the last good map", "file", f.path, "error", err.Error())
		return
	}
	if bytes.Equal(raw, f.last) {
		return
	}
	f.last = raw
	err = p.ReloadSlotMap(raw)
	if err != nil {
		log.Error("slot map file rejected; keeping the last good map", "file", f.path, "error", err.Error())
		return
	}
	log.Info("slot map reloaded", "file", f.path, "cells", p.Router().Len())
}

// ReloadSlotMap parses and builds raw (a slot map file's content) and, if
// it is valid, swaps it in. A bad map is counted in
// cellgate_router_slotmap_reloads_total{result="invalid"} and leaves the
// current map in use.
func (p *Proxy) ReloadSlotMap(raw []byte) error {
	_, r, err := cells.ParseSlotMap(raw)
	if err == nil {
		err = p.SetRouter(r)
	}
	if err != nil {
		p.m.reloadInvalid.Add(1)
		p.m.slotMapCurrent.Store(false)
		p.noteReload("invalid", err)
		return err
	}
	p.m.reloadOK.Add(1)
	p.m.slotMapCurrent.Store(true)
	p.noteReload("ok", nil)
	return nil
}
