package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/probe"
	"github.com/cellgate/cellgate/internal/runtime/idempotency"
	"github.com/cellgate/cellgate/internal/runtime/tenantmw"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenancy"
)

// ReadinessCheck reports whether a dependency can serve; nil means ready.
type ReadinessCheck func(ctx context.Context) error

// ReadinessDetail reports a degraded state that does not make the process
// unready (a stale key set still verifies tokens); "" means nothing to say.
type ReadinessDetail func() string

// Options are the parts of a Server that are not in the spec.
type Options struct {
	// Logger receives JSON logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives every metric; nil means a new registry holding the
	// Go runtime and process collectors.
	Registry *prometheus.Registry
	// Getenv reads secrets (session and JWT keys, the admin token); nil
	// means os.Getenv.
	Getenv func(string) string
	// OnTenantRejection, when set, hears the tenant of every request the
	// tenant bulkhead refuses (the operator console's top tenants).
	OnTenantRejection func(tenant string)
	// OnTenantLimit, when set with Plans, hears the tenant and resource
	// (request, rate, quota, db) of every refusal by a tenant's plan
	// limits (shadow false) and of every request a shadow override would
	// have refused (shadow true): the operator console's per-tenant
	// counts, which metrics (per plan, never per tenant) do not give.
	OnTenantLimit func(tenant, resource string, shadow bool)
	// Shards are the cell's databases: each tenant request's handler gets
	// the accessor to its tenant's shard, with the request's database
	// permits. nil: the accessors fail every checkout with
	// shards.ErrNoDatabases.
	Shards *shards.Set
	// Plans, when set, gives every tenant the limits of its plan and
	// overrides (tenancy.plans, the cell's tenant table) instead of the
	// uniform tenancy fields, and applies the store's changes live. The
	// caller runs the store (plans.Store.Run).
	Plans *plans.Store
	// Tracing makes a server span per request of a spec route (nil or
	// off: none).
	Tracing *telemetry.Tracing
	// TraceTenant adds the tenant id to the server spans
	// (cellgate.tenant): opt-in, since a trace backend then holds tenant
	// ids.
	TraceTenant bool
	// AccessLog configures the access log; nil writes none.
	AccessLog *AccessLog
}

// Server is one cell's HTTP server.
type Server struct {
	cfg      config.Config
	echo     *echo.Echo
	log      *slog.Logger
	reg      *prometheus.Registry
	tenantMW []echo.MiddlewareFunc // tenancy → frozen slots → tenant bulkhead → server admission
	bulk     Bulkheads
	shards   *shards.Set
	obs      *observer
	idem     *idempotency.Keys // nil: the config has no idempotent route

	mu      sync.Mutex
	checks  []namedCheck
	details []namedDetail
	ready   atomic.Bool // set once every check has passed once

	closers []func() error // background work of the tenancy extractor
}

type namedDetail struct {
	name   string
	detail ReadinessDetail
}

type namedCheck struct {
	name  string
	check ReadinessCheck
}

// New builds a Server from the final config. Routes are added with Public
// and Tenant before Run.
func New(cfg config.Config, opts Options) (*Server, error) {
	if cfg.Server.BodyLimitBytes <= 0 {
		return nil, fmt.Errorf("server.body_limit_bytes: must be > 0, got %d", cfg.Server.BodyLimitBytes)
	}
	if cfg.Server.BodyMinBytesPerSecond < 0 {
		return nil, fmt.Errorf("server.body_min_bytes_per_second: must be >= 0, got %d", cfg.Server.BodyMinBytesPerSecond)
	}
	if cfg.Server.BodyReadTimeout < 0 || cfg.Server.BodyRateGrace < 0 {
		return nil, fmt.Errorf("server.body_read_timeout, server.body_rate_grace: must not be negative")
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	s := &Server{cfg: cfg, log: opts.Logger, reg: opts.Registry, shards: opts.Shards}
	if cfg.IdempotentRoutes() {
		k, err := idempotency.New(idempotency.Options{Config: cfg.Server.Idempotency, Log: opts.Logger})
		if err != nil {
			return nil, err
		}
		s.idem = k
	}
	skip, err := tenantmw.PublicSkipper(cfg.Tenancy.PublicPaths...)
	if err != nil {
		return nil, fmt.Errorf("tenancy.public_paths: %w", err)
	}
	if cfg.Tenancy.Enabled {
		tc, err := tenancy.FromSpec(cfg.Tenancy, opts.Getenv)
		if err != nil {
			return nil, err
		}
		tc.Logger, tc.Registerer = opts.Logger, opts.Registry
		x, err := tenancy.NewExtractor(tc)
		if err != nil {
			return nil, fmt.Errorf("tenancy: %w", err)
		}
		if c, ok := x.(io.Closer); ok {
			s.closers = append(s.closers, c.Close)
		}
		if r, ok := x.(tenancy.KeySetReporter); ok {
			if _, on := r.KeySetStatus(); on {
				s.AddReadinessDetail("tenancy.jwt.jwks_url", func() string {
					st, _ := r.KeySetStatus()
					return st.Problem()
				})
			}
		}
		mc := tenantmw.Config{Skipper: skip, Extractor: x}
		if opts.Plans != nil {
			// Only a verified token reports a plan (tenancy.PlanExtractor).
			mc.OnPlanClaim = opts.Plans.ObserveClaim
		}
		mw, err := tenantmw.WithConfig(mc)
		if err != nil {
			return nil, fmt.Errorf("tenancy: %w", err)
		}
		s.tenantMW = append(s.tenantMW, mw)
		if opts.Shards != nil {
			s.tenantMW = append(s.tenantMW, frozenSlots(opts.Shards))
		}
	}
	bulk, mws, err := buildBulkheads(cfg, opts.Registry, skip, opts.OnTenantRejection, opts.OnTenantLimit, opts.Plans)
	if err != nil {
		return nil, err
	}
	s.bulk = bulk
	s.tenantMW = append(s.tenantMW, mws...)
	metrics, err := newHTTPMetrics(opts.Registry)
	if err != nil {
		bulk.close()
		return nil, fmt.Errorf("http metrics: %w", err)
	}
	s.obs = &observer{
		metrics: metrics, log: opts.Logger, tracer: opts.Tracing.Tracer("github.com/cellgate/cellgate/internal/runtime"),
		traceTenant: opts.TraceTenant, access: AccessLog{Off: true}, cell: cfg.Server.Cell,
		refusals: telemetry.NewLimiter(refusalEvery, refusalLines),
	}
	if opts.Tracing != nil {
		s.obs.prop = opts.Tracing.Propagator
	}
	if opts.AccessLog != nil {
		s.obs.access = *opts.AccessLog
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Logger = echoLogger{Logger: e.Logger, slog: opts.Logger, cell: cfg.Server.Cell}
	e.HTTPErrorHandler = problemErrorHandler(opts.Logger)
	e.Binder = &Binder{}
	rs := &requestScope{
		log: opts.Logger, limit: cfg.Server.BodyLimitBytes, timeout: cfg.Server.RequestTimeout.D(),
		body: httpguard.BodyLimits{
			Timeout: cfg.Server.BodyReadTimeout.D(),
			Rate:    cfg.Server.BodyMinBytesPerSecond,
			Grace:   cfg.Server.BodyRateGrace.D(),
		},
		rules: httpguard.NewRules(cfg.Tenancy.Header.Name, true),
	}
	e.Use(rs.middleware)
	e.GET(probe.Health, func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET(probe.Ready, s.readyz)
	e.GET(probe.Metrics, echo.WrapHandler(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry, EnableOpenMetrics: true})))
	if name := cfg.Server.AdminTokenEnv; name != "" {
		if token := opts.Getenv(name); token != "" {
			e.GET(AdmissionPath, adminAuth(token, func(c echo.Context) error {
				return c.JSON(http.StatusOK, s.bulk.Report())
			}))
		}
	}
	s.echo = e
	return s, nil
}

// Echo exposes the underlying Echo instance for app-level additions.
func (s *Server) Echo() *echo.Echo { return s.echo }

// Registry is the metrics registry every component registers into.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Logger is the server's structured logger.
func (s *Server) Logger() *slog.Logger { return s.log }

// Bulkheads returns the server's admission state (engines and limiter).
func (s *Server) Bulkheads() Bulkheads { return s.bulk }

// Public adds a route that skips tenancy and is never counted; only the
// per-route HTTP metrics see it. mws (the app's own middleware, mws[0]
// outermost) run inside the metrics, around h.
func (s *Server) Public(method, path string, h echo.HandlerFunc, mws ...echo.MiddlewareFunc) {
	s.echo.Add(method, path, chain(chain(h, mws...), s.obs.route(method, path)))
}

// TenantHandler serves a tenant route. sh is the request's accessor to
// its tenant's shard, built once per request: its checkouts take the
// tenant's database permits (tenancy.max_db_connections) while the handler
// runs, its streaming body included, and none once it has returned.
type TenantHandler = func(c echo.Context, sh shards.Accessor) error

// Tenant adds a route behind the tenant chain: HTTP metrics → tenancy →
// frozen slots → tenant bulkhead → server admission → mws → the request's
// shard accessor → h. mws are the app's own middleware (mws[0] outermost):
// they see the request's tenant (internal/tenant) and run while its
// permits are held, so a refused request never reaches them. A tenant
// whose slot is frozen for a move between shards (internal/shardmap) is
// answered 503 slot_moving, and a tenant of another cell 421, before h.
func (s *Server) Tenant(method, path string, h TenantHandler, mws ...echo.MiddlewareFunc) {
	inner := chain(s.bulk.dbPermits.Shard(s.shards, h), mws...)
	s.echo.Add(method, path, chain(chain(inner, s.tenantMW...), s.obs.route(method, path)))
}

// Idempotent adds a tenant route like Tenant whose handler honours an
// Idempotency-Key header (internal/runtime/idempotency). The config must
// mark the route idempotent, so that server.idempotency was checked.
func (s *Server) Idempotent(method, path string, h TenantHandler, mws ...echo.MiddlewareFunc) {
	if s.idem == nil {
		panic("runtime: " + method + " " + path + " is registered as idempotent but no route of the config is marked idempotent")
	}
	s.Tenant(method, path, s.idem.Wrap(method, path, h), mws...)
}

// Idempotency returns the idempotency keys of the idempotent routes (its
// RunSweeper deletes expired keys), nil when no route is idempotent.
func (s *Server) Idempotency() *idempotency.Keys { return s.idem }

// chain wraps h in mws (mws[0] outermost) once, at registration. Echo's
// route-level middleware would rebuild the closures on every request.
func chain(h echo.HandlerFunc, mws ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// AddReadiness registers a check /readyz runs; the cell is ready when all
// pass.
func (s *Server) AddReadiness(name string, check ReadinessCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, namedCheck{name, check})
}

// AddReadinessDetail registers a detail /readyz reports under "details"
// when it is not "", without making the process unready.
func (s *Server) AddReadinessDetail(name string, d ReadinessDetail) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.details = append(s.details, namedDetail{name, d})
}

// readyz runs every check with a short deadline so a hung database makes the
// probe fail rather than hang.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	checks := append([]namedCheck(nil), s.checks...)
	details := append([]namedDetail(nil), s.details...)
	s.mu.Unlock()
	failed := map[string]string{}
	for _, nc := range checks {
		if err := nc.check(ctx); err != nil {
			failed[nc.name] = err.Error()
		}
	}
	body := map[string]any{"status": "ready"}
	said := map[string]string{}
	for _, nd := range details {
		if d := nd.detail(); d != "" {
			said[nd.name] = d
		}
	}
	if len(said) > 0 {
		body["details"] = said
	}
	if len(failed) > 0 {
		body["status"], body["failed"] = "not ready", failed
		return c.JSON(http.StatusServiceUnavailable, body)
	}
	s.ready.Store(true)
	return c.JSON(http.StatusOK, body)
}

// Run serves on the configured address until ctx is done, then drains
// in-flight requests within server.shutdown_timeout.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Server.Address)
	if err != nil {
		return fmt.Errorf("server.address %q: %w", s.cfg.Server.Address, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on an existing listener (tests listen on port 0). Every
// connection is an httpguard.Conn: the head deadline fixed at a request's
// first byte, and the framing net/http would forget checked.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = httpguard.Listener{Listener: ln, HeaderTimeout: s.cfg.Server.ReadHeaderTimeout.D()}
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: s.cfg.Server.ReadHeaderTimeout.D(),
		ReadTimeout:       s.cfg.Server.ReadTimeout.D(),
		WriteTimeout:      s.cfg.Server.WriteTimeout.D(),
		IdleTimeout:       s.cfg.Server.IdleTimeout.D(),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	httpguard.Install(srv)
	s.log.Info("listening", "address", ln.Addr().String(), "service", s.cfg.Service.Name)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "deadline", s.cfg.Server.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Server.ShutdownTimeout.D())
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.bulk.close() // drained: nothing admits any more
	for _, c := range s.closers {
		_ = c()
	}
	return nil
}
