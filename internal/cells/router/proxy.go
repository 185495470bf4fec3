package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/admission/admissionmetrics"
	"github.com/cellgate/cellgate/internal/probe"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/drain"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/slots"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellgate/cellgate/internal/telemetry"
	"github.com/cellgate/cellgate/internal/tenancy"
)

// ProxyConfig configures a Proxy. Zero fields take their value from
// DefaultProxyConfig, the one place defaults live.
type ProxyConfig struct {
	// CheckPath is the path the router's active health checks ask each
	// cell for; a 2xx answer means the cell can serve. Default: the cells'
	// readiness probe, probe.Ready (/readyz): a cell that is up but not
	// migrated must not get traffic.
	CheckPath string
	// HealthInterval is the time between two active checks of a cell, and
	// so the longest a dead cell's tenants wait for 503s when no request
	// notices first. Default: 1s.
	HealthInterval time.Duration
	// HealthTimeout bounds one check. Default: 1s.
	HealthTimeout time.Duration
	// FailAfter is how many consecutive failed checks, or consecutive
	// transport errors on requests, mark a cell down. A refused or timed
	// out connection attempt marks it down at once: nothing can be served
	// there. A down cell comes back with its next passing check. Default: 2.
	FailAfter int
	// DialTimeout bounds connecting to a cell. Default: 2s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a cell's response head
	// (not the body, so streams are unaffected); past it the client gets
	// 504. Keep it above the cells' request timeout. Default: 60s.
	ResponseHeaderTimeout time.Duration
	// MaxInFlightPerCell caps the requests the router has in flight to one
	// cell; a request over it gets 503 with Retry-After: 1, so a slow cell
	// cannot take every connection and goroutine of the router. A stream
	// or WebSocket counts for its whole life. -1 means no cap.
	// Default: 1024.
	MaxInFlightPerCell int
	// MaxInFlightPerTenant caps the requests one tenant has in flight
	// through this router, in front of the per-cell cap, so one tenant
	// cannot take its cell's whole MaxInFlightPerCell (stalled uploads,
	// slow answers): a request over it gets 503 with Retry-After: 1 and
	// code tenant_overloaded. Counted by an admission.Engine (the cells'
	// engine), keyed by tenant id; requests without a usable tenant
	// share one account. Keep it at most MaxInFlightPerCell (the spec's policy
	// checks router.max_in_flight_per_tenant). -1 means no cap. Default:
	// 256.
	MaxInFlightPerTenant int
	// Admission sets the tenant engine's layout and account bounds
	// (shards, max_accounts, idle_after), as the cells' admission block
	// does theirs. Zero: admission.DefaultConfig().
	Admission admission.Config
	// BodyTimeout bounds reading a forwarded request's whole body from the
	// client; past it the client gets 408 and its connection is closed,
	// and the cell never counts it as its fault. -1 means none. Default:
	// 30s (the cells' read_timeout).
	BodyTimeout time.Duration
	// MinBodyRate is the slowest a client may send a body, in bytes per
	// second, after BodyRateGrace: the body must have arrived by
	// start + BodyRateGrace + bytes / MinBodyRate (and within
	// BodyTimeout), or the client gets 408. -1 means no minimum.
	// Default: 1024.
	MinBodyRate int64
	// BodyRateGrace is the time a body may take before MinBodyRate
	// applies (a client's first packets, a slow start). Default: 5s.
	BodyRateGrace time.Duration
	// MaxIdleConnsPerCell is the keep-alive pool size per cell. Default:
	// 256.
	MaxIdleConnsPerCell int
	// Tracing makes a server span per request and propagates its W3C
	// trace context to the cell; nil or off: none, and the client's
	// traceparent passes through untouched.
	Tracing *telemetry.Tracing
	// TraceTenant adds the tenant id to the router's spans
	// (cellgate.tenant): opt-in, since a trace backend then holds tenant
	// ids.
	TraceTenant bool
	// TenantHeader is the request header the tenancy block reads the
	// tenant from (tenancy.header.name). A Connection header naming it,
	// Authorization or Cookie is refused (httpguard.Rules), whatever the
	// source. Default: X-Tenant-ID.
	TenantHeader string
	// CellHeader is the response header naming the cell that served (or
	// refused) the request. Default: X-Cellgate-Cell.
	CellHeader string
	// AccessLog configures the router's access log: a line per request it
	// routes or refuses (method, cell, slot, status, refusal code,
	// duration, bytes, request id, trace id, tenant) written to Logger.
	// nil or Off: none, and requests are not wrapped to observe them.
	AccessLog *telemetry.AccessLog
	// Logger receives state changes (a cell going down or up) and upstream
	// errors. Default: slog.Default().
	Logger *slog.Logger
	// Now stamps what Cells and SlotMapStatus report (a cell down since, a
	// last error, a reload); never read by a request that succeeds.
	// Default: time.Now.
	Now func() time.Time
}

// DefaultProxyConfig holds every default of ProxyConfig.
var DefaultProxyConfig = ProxyConfig{
	CheckPath:             probe.Ready,
	HealthInterval:        time.Second,
	HealthTimeout:         time.Second,
	FailAfter:             2,
	DialTimeout:           2 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	MaxInFlightPerCell:    1024,
	MaxInFlightPerTenant:  256,
	BodyTimeout:           30 * time.Second,
	MinBodyRate:           1024,
	BodyRateGrace:         5 * time.Second,
	MaxIdleConnsPerCell:   256,
	CellHeader:            "X-Cellgate-Cell",
	TenantHeader:          "X-Tenant-ID",
}

func (c ProxyConfig) withDefaults() ProxyConfig {
	d := DefaultProxyConfig
	c.CheckPath = cmp.Or(c.CheckPath, d.CheckPath)
	c.HealthInterval = cmp.Or(c.HealthInterval, d.HealthInterval)
	c.HealthTimeout = cmp.Or(c.HealthTimeout, d.HealthTimeout)
	c.FailAfter = cmp.Or(c.FailAfter, d.FailAfter)
	c.DialTimeout = cmp.Or(c.DialTimeout, d.DialTimeout)
	c.ResponseHeaderTimeout = cmp.Or(c.ResponseHeaderTimeout, d.ResponseHeaderTimeout)
	c.MaxInFlightPerCell = cmp.Or(c.MaxInFlightPerCell, d.MaxInFlightPerCell)
	if c.MaxInFlightPerTenant == 0 {
		c.MaxInFlightPerTenant = d.MaxInFlightPerTenant
		if c.MaxInFlightPerCell > 0 {
			c.MaxInFlightPerTenant = min(c.MaxInFlightPerTenant, c.MaxInFlightPerCell)
		}
	}
	c.BodyTimeout = cmp.Or(c.BodyTimeout, d.BodyTimeout)
	c.MinBodyRate = cmp.Or(c.MinBodyRate, d.MinBodyRate)
	c.BodyRateGrace = cmp.Or(c.BodyRateGrace, d.BodyRateGrace)
	if c.Admission == (admission.Config{}) {
		c.Admission = admission.DefaultConfig()
	}
	c.MaxIdleConnsPerCell = cmp.Or(c.MaxIdleConnsPerCell, d.MaxIdleConnsPerCell)
	c.CellHeader = cmp.Or(c.CellHeader, d.CellHeader)
	c.TenantHeader = cmp.Or(c.TenantHeader, d.TenantHeader)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c ProxyConfig) validate() error {
	switch {
	case c.CheckPath[0] != '/':
		return fmt.Errorf("cells: ProxyConfig.CheckPath %q must start with /", c.CheckPath)
	case c.HealthInterval < 0:
		return fmt.Errorf("cells: ProxyConfig.HealthInterval must be > 0, got %s", c.HealthInterval)
	case c.HealthTimeout < 0:
		return fmt.Errorf("cells: ProxyConfig.HealthTimeout must be > 0, got %s", c.HealthTimeout)
	case c.FailAfter < 1:
		return fmt.Errorf("cells: ProxyConfig.FailAfter must be >= 1, got %d", c.FailAfter)
	case c.DialTimeout < 0:
		return fmt.Errorf("cells: ProxyConfig.DialTimeout must be > 0, got %s", c.DialTimeout)
	case c.ResponseHeaderTimeout < 0:
		return fmt.Errorf("cells: ProxyConfig.ResponseHeaderTimeout must be > 0, got %s", c.ResponseHeaderTimeout)
	case c.MaxInFlightPerCell < -1:
		return fmt.Errorf("cells: ProxyConfig.MaxInFlightPerCell must be -1 (no cap) or > 0, got %d", c.MaxInFlightPerCell)
	case c.MaxInFlightPerTenant < -1:
		return fmt.Errorf("cells: ProxyConfig.MaxInFlightPerTenant must be -1 (no cap) or > 0, got %d", c.MaxInFlightPerTenant)
	case c.MaxInFlightPerCell > 0 && c.MaxInFlightPerTenant > c.MaxInFlightPerCell:
		return fmt.Errorf("cells: ProxyConfig.MaxInFlightPerTenant (%d) must be at most MaxInFlightPerCell (%d)", c.MaxInFlightPerTenant, c.MaxInFlightPerCell)
	case c.BodyTimeout < -1:
		return fmt.Errorf("cells: ProxyConfig.BodyTimeout must be -1 (none) or > 0, got %s", c.BodyTimeout)
	case c.MinBodyRate < -1:
		return fmt.Errorf("cells: ProxyConfig.MinBodyRate must be -1 (none) or > 0, got %d", c.MinBodyRate)
	case c.BodyRateGrace < 0:
		return fmt.Errorf("cells: ProxyConfig.BodyRateGrace must be > 0, got %s", c.BodyRateGrace)
	case c.MaxIdleConnsPerCell < 0:
		return fmt.Errorf("cells: ProxyConfig.MaxIdleConnsPerCell must be > 0, got %d", c.MaxIdleConnsPerCell)
	}
	if _, err := textprotoKey(c.CellHeader); err != nil {
		return fmt.Errorf("cells: ProxyConfig.CellHeader: %w", err)
	}
	return nil
}

// Proxy is the cell router's request path: an http.Handler that sends
// each request to its tenant's cell. See the package doc for what it
// guarantees.
//
// A request whose tenant can be extracted goes to the tenant's cell. A
// request without one (a public route, or a missing or bad tenant) goes to
// any cell that is up, round-robin: the cells are identical, so that cell
// answers exactly as the tenant's own would (serving the public route, or
// refusing with the cells' own 400/401), and the router needs no copy of
// the route table.
type Proxy struct {
	cfg        ProxyConfig
	x          tenancy.Extractor // nil: tenancy disabled, one cell only
	cellHeader string            // canonical form of cfg.CellHeader
	rules      httpguard.Rules   // the refusals it shares with the cells
	retryAfter int               // Retry-After seconds for a down cell
	noCell     *httpguard.Problem
	m          *proxyMetrics
	tenants    *admission.Engine // the per-tenant cap; nil: none
	body       httpguard.BodyLimits
	tracer     trace.Tracer // nil: tracing off
	prop       propagation.TextMapPropagator

	table atomic.Pointer[table]

	reloadMu sync.Mutex // guards reloads; never taken per request
	reloads  reloadRing

	retired drain.Retired // replaced maps' in-flight counts

	mu      sync.Mutex // guards the fields below; never taken per request
	ctx     context.Context
	started bool
	closed  bool
}

// table is one slot map with its backends, swapped as a whole.
type table struct {
	r        *cells.CellRouter
	backends []*backend // index = cell index in r
	rr       atomic.Uint32
	// gen counts the maps this Proxy has used (1 = the first); digest is
	// the SHA-256 of the map's canonical form, so equal maps have equal
	// digests however their files were written; since is when it was
	// swapped in.
	gen    uint64
	digest string
	since  time.Time
	// inflight counts the forwarded requests routed with this map that
	// have not finished. Once the map is replaced, it tells a slot move
	// when no request routed by the old map can still reach the source
	// (ServeReady's requests_on_older_maps).
	inflight drain.Counter
}

// NewProxy builds a Proxy for router's cells. x extracts tenants exactly
// as the cells do (build it with tenancy.NewExtractor from
// runtime.TenancyConfig); nil means tenancy is off, which is only allowed
// with one cell. Metrics are registered in reg. Call Start to begin health
// checks and Close when done.
func NewProxy(cfg ProxyConfig, x tenancy.Extractor, router *cells.CellRouter, reg prometheus.Registerer) (*Proxy, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("cells: NewProxy needs a prometheus registry")
	}
	hdr, _ := textprotoKey(cfg.CellHeader)
	secs := int(math.Ceil(cfg.HealthInterval.Seconds()))
	p := &Proxy{
		cfg:        cfg,
		x:          x,
		cellHeader: hdr,
		retryAfter: max(1, secs),
		rules:      httpguard.NewRules(cfg.TenantHeader, false),
		ctx:        context.Background(),
	}
	if cfg.Tracing != nil && cfg.Tracing.Enabled {
		p.tracer, p.prop = cfg.Tracing.Tracer("github.com/cellgate/cellgate/internal/cells/router"), cfg.Tracing.Propagator
	}
	p.noCell = httpguard.NewRetryProblem(http.StatusServiceUnavailable, p.retryAfter, "no_cell", "no cell is available")
	p.body = httpguard.BodyLimits{Timeout: max(cfg.BodyTimeout, 0), Grace: cfg.BodyRateGrace, Rate: max(cfg.MinBodyRate, 0)}
	if cfg.MaxInFlightPerTenant > 0 && x != nil {
		ec := cfg.Admission
		ec.MaxConcurrent = int64(cfg.MaxInFlightPerTenant)
		ec.Rate, ec.Burst, ec.Funding, ec.OverageAllowance = 0, 0, 0, 0 // concurrency only: the cells meter
		e, err := admission.New(ec)
		if err != nil {
			return nil, fmt.Errorf("cells: ProxyConfig.Admission: %w", err)
		}
		p.tenants = e
	}
	p.m = newProxyMetrics(p)
	unregister := func() {}
	if err := reg.Register(p.m); err != nil {
		p.closeEngine()
		return nil, fmt.Errorf("cells: register metrics: %w", err)
	}
	if p.tenants != nil {
		am := admissionmetrics.New(p.tenants, "router")
		if err := reg.Register(am); err != nil {
			reg.Unregister(p.m)
			p.closeEngine()
			return nil, fmt.Errorf("cells: register metrics: %w", err)
		}
		unregister = func() { reg.Unregister(am) }
	}
	if err := p.SetRouter(router); err != nil {
		reg.Unregister(p.m)
		unregister()
		p.closeEngine()
		return nil, err
	}
	return p, nil
}

// Router returns the slot map in use.
func (p *Proxy) Router() *cells.CellRouter { return p.table.Load().r }

// SetRouter swaps in a new slot map. Cells whose name and URL are
// unchanged keep their backend (health, connections, counters); others get
// a new one, and removed cells are stopped. Requests in flight finish on
// the map they started with.
func (p *Proxy) SetRouter(r *cells.CellRouter) error {
	if r == nil {
		return errors.New("cells: SetRouter(nil)")
	}
	if p.x == nil && r.Len() > 1 {
		return fmt.Errorf("cells: tenancy is disabled, so the router cannot place tenants on %d cells; enable tenancy or run one cell", r.Len())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("cells: proxy is closed")
	}
	old := p.table.Load()
	keep := map[string]*backend{}
	if old != nil {
		for _, b := range old.backends {
			keep[b.key()] = b
		}
	}
	t := &table{r: r, backends: make([]*backend, r.Len()), gen: 1, digest: mapDigest(r), since: p.cfg.Now()}
	if old != nil {
		t.gen = old.gen + 1
	}
	for i, c := range r.Cells() {
		k := c.Name + "\x00" + c.URL
		if b, ok := keep[k]; ok {
			t.backends[i] = b
			delete(keep, k)
			continue
		}
		b := newBackend(p, c, r.URL(i))
		t.backends[i] = b
		if p.started {
			b.start(p.ctx)
		}
	}
	p.table.Store(t)
	if old != nil {
		p.retired.Add(&old.inflight)
	}
	for _, b := range keep {
		b.stop()
	}
	return nil
}

// Start runs one health check of every cell now, then keeps checking each
// cell every HealthInterval until ctx ends or Close is called.
func (p *Proxy) Start(ctx context.Context) {
	p.mu.Lock()
	if p.started || p.closed {
		p.mu.Unlock()
		return
	}
	p.started, p.ctx = true, ctx
	bs := p.table.Load().backends
	for _, b := range bs {
		b.start(ctx)
	}
	p.mu.Unlock()
}

// CheckNow runs one health check of every cell concurrently and waits for
// them: for startup and for tests that drive time themselves.
func (p *Proxy) CheckNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range p.table.Load().backends {
		wg.Go(func() { b.check(ctx) })
	}
	wg.Wait()
}

// Close stops the health checks and closes idle upstream connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, b := range p.table.Load().backends {
		b.stop()
	}
	p.closeEngine()
}

func (p *Proxy) closeEngine() {
	if p.tenants != nil {
		p.tenants.Close()
	}
}

// CellUp reports whether the named cell is currently considered up.
func (p *Proxy) CellUp(name string) bool {
	t := p.table.Load()
	if i := t.r.Index(name); i >= 0 {
		return t.backends[i].up.Load()
	}
	return false
}

// ServeHTTP routes one request. Routing takes no lock: one atomic load of
// the map, a slot lookup, and atomic counters. A request the edge's rules
// refuse (httpguard.Rules: framing, versions, methods, the identity-header
// rule) is answered before any routing, exactly as a cell would answer it,
// and never reaches a cell.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r, span := p.startSpan(r)
	if span != nil {
		defer span.End()
	}
	if a := p.startAccess(w); a != nil {
		defer p.logAccess(a, r, time.Now())
		w = a
	}
	if p.refused(w, r) {
		return
	}
	t := p.table.Load()
	var b *backend
	frozen := false
	var tenant string
	if p.x != nil {
		if id, err := p.x.Extract(r); err == nil {
			tenant = id
			slot, _ := slots.Slot(tenant) // a tenant id is never empty
			b = t.backends[t.r.IndexForSlot(slot)]
			frozen = t.r.Frozen(slot)
			p.routedSpan(span, b, slot, tenant)
			if a, ok := w.(*accessWriter); ok {
				a.slot, a.tenant = slot, tenant
			}
		}
	}
	if b == nil && !frozen {
		b = t.pickUp()
	}
	if a, ok := w.(*accessWriter); ok && b != nil {
		a.cell = b.name
	}
	switch {
	case frozen:
		b.rejectFrozen.Add(1)
		b.refuse(w, r, errCellMoving)
	case b == nil:
		p.m.noCell.Add(1)
		refusedSpan(w, r, p.noCell)
		setRequestID(w, r)
		p.noCell.Write(w, r.Method == http.MethodHead)
	case !b.up.Load():
		b.rejectDown.Add(1)
		b.refuse(w, r, b.probDown)
	default:
		if tenant == "" {
			// No usable tenant: all such requests share one account, so
			// they cannot fill a cell's cap either (public routes, or an
			// attacker who leaves the tenant out).
			tenant = anonymousTenant
		}
		p.sendOn(t, w, r, b, tenant)
	}
}

// sendOn is send, counted in t's in-flight requests (a deferred decrement:
// ReverseProxy aborts a broken stream with a panic).
func (p *Proxy) sendOn(t *table, w http.ResponseWriter, r *http.Request, b *backend, tenant string) {
	t.inflight.Enter()
	defer t.inflight.Leave()
	p.send(w, r, b, tenant)
}

// olderInFlight returns how many forwarded requests routed by a replaced
// map are still in flight, and forgets the replaced maps that have none:
// no new request starts on a map once it is replaced (bar one that loaded
// it an instant before the swap and has not counted itself yet, which a
// slot move's fence covers).
func (p *Proxy) olderInFlight() int64 { return p.retired.InFlight() }

// refused answers r if the edge's rules refuse it, and says so.
func (p *Proxy) refused(w http.ResponseWriter, r *http.Request) bool {
	prob := p.rules.Check(r)
	if prob == nil {
		return false
	}
	p.m.badRequests.Add(1)
	refusedSpan(w, r, prob)
	setRequestID(w, r)
	httpguard.CloseAfter(w)
	prob.Write(w, r.Method == http.MethodHead)
	return true
}

// anonymousTenant is the tenant-cap account of the requests without a
// usable tenant; a NUL byte is never in a tenant id.
const anonymousTenant = "\x00anonymous"

// The router's own refusals that name no cell.
var (
	errTenantBusy = httpguard.NewRetryProblem(http.StatusServiceUnavailable, 1, "tenant_overloaded",
		"tenant has too many requests in flight at the router")
	errTenantCapacity = httpguard.NewRetryProblem(http.StatusServiceUnavailable, 1, "tenant_capacity",
		"the router holds too many tenants")
	errCellMoving = httpguard.NewRetryProblem(http.StatusServiceUnavailable, 1, "cell_moving",
		"tenant is moving to another cell")
)

// bodyKey holds a forwarded request's httpguard.Body in its context:
// ReverseProxy hands its error handler the outgoing request, whose body
// it may wrap, so the context is how onError finds this one.
type bodyKey struct{}

// send forwards r to b's cell within the tenant's cap and the per-cell
// cap.
func (p *Proxy) send(w http.ResponseWriter, r *http.Request, b *backend, tenant string) {
	var permit admission.Permit
	if p.tenants != nil {
		var o admission.Outcome
		if permit, o = p.tenants.Admit(tenant, 1); o != admission.Admitted {
			b.rejectTenant.Add(1)
			prob := errTenantBusy
			if o == admission.RejectedCapacity {
				prob = errTenantCapacity
			}
			b.refuse(w, r, prob)
			return
		}
		defer permit.Release()
	}
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1) // also runs when the proxy aborts a stream with a panic
	if limit := p.cfg.MaxInFlightPerCell; limit > 0 && n > int64(limit) {
		b.rejectBusy.Add(1)
		b.refuse(w, r, b.probBusy)
		return
	}
	if len(r.Header[requestid.Header]) == 0 || r.Header[requestid.Header][0] == "" {
		r.Header[requestid.Header] = []string{requestid.New()}
	}
	w.Header()[p.cellHeader] = b.nameValue
	if r.Body != nil && r.Body != http.NoBody {
		body := httpguard.NewBody(w, r.Body, p.body, time.Now())
		defer body.Finish()
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
		r.Body = body
	}
	fw := flushWriters.Get().(*flushWriter)
	fw.ResponseWriter, fw.cellHeader, fw.cellValue = w, p.cellHeader, b.nameValue
	b.proxy.ServeHTTP(fw, r)
	fw.ResponseWriter, fw.cellValue = nil, nil // a panic skips this and the Put: the GC takes it
	flushWriters.Put(fw)
}

// flushWriter is the ResponseWriter ReverseProxy writes to. It flushes
// every write of a body to the client, so a body with a Content-Length that the cell sends slowly (a
// download, long polling) is not held in the server's buffer;
// ReverseProxy flushes SSE and bodies of unknown length itself. A small
// answer is one write of the cell's body, so head and body still leave in
// one packet. Unwrap lets ReverseProxy's ResponseController reach the
// connection (hijack for upgrades, flush for trailers). It also puts the
// cell header back on the final answer: ReverseProxy clears the whole
// header after passing on a 1xx answer (103 Early Hints), the cell header
// with it.
type flushWriter struct {
	http.ResponseWriter
	cellHeader string
	cellValue  []string
}

// WriteHeader restores the cell header before a final answer's head.
func (f *flushWriter) WriteHeader(code int) {
	if code >= 200 {
		if h := f.Header(); len(h[f.cellHeader]) == 0 {
			h[f.cellHeader] = f.cellValue
		}
	}
	f.ResponseWriter.WriteHeader(code)
}

var flushWriters = sync.Pool{New: func() any { return new(flushWriter) }}

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.ResponseWriter.Write(p)
	if err == nil {
		// A failed flush is a gone client: the next write says so.
		_ = http.NewResponseController(f.ResponseWriter).Flush()
	}
	return n, err
}

// Unwrap returns the server's ResponseWriter.
func (f *flushWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// pickUp returns the next cell that is up, round-robin, or nil.
func (t *table) pickUp() *backend {
	n := uint32(len(t.backends))
	start := t.rr.Add(1)
	for i := range n {
		if b := t.backends[(start+i)%n]; b.up.Load() {
			return b
		}
	}
	return nil
}

// setRequestID makes sure a response the router writes itself carries the
// request id the cell would have echoed.
func setRequestID(w http.ResponseWriter, r *http.Request) {
	id := r.Header[requestid.Header]
	if len(id) == 0 || id[0] == "" {
		id = []string{requestid.New()}
	}
	w.Header()[requestid.Header] = id
}

// textprotoKey canonicalizes a header name after checking it is a token.
func textprotoKey(name string) (string, error) {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool { return !tokenChar(c) }) {
		return "", fmt.Errorf("%q is not a valid header name", name)
	}
	return http.CanonicalHeaderKey(name), nil
}

// tokenChar reports whether c may appear in a token (RFC 9110 §5.6.2).
func tokenChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)
}

var _ http.Handler = (*Proxy)(nil)
