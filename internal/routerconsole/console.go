package routerconsole

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/cells/router"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/console/consolechart"
)

// Source is what the console reads: a *router.Proxy.
type Source interface {
	Cells() []router.CellStatus
	SlotMapStatus() router.SlotMapStatus
}

// Config is what a Console shows and how it guards it.
type Config struct {
	// AdminToken reads (required: without it there is no console).
	AdminToken string
	// Source is the running proxy.
	Source Source
	// SlotMapFile is the slot map file the router reloads ("" when it
	// routes with the spec's cells): shown on the slot map page.
	SlotMapFile string
	// SampleEvery is the traffic sampler's period. 0 means DefaultSampleEvery.
	SampleEvery time.Duration
	// Samples is how many samples each cell's rings keep. 0 means
	// DefaultSamples.
	Samples int
	// SessionTTL is the longest a login lasts. 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// SessionIdle ends a session unused for this long; 0 or more than
	// MaxSessionIdle means MaxSessionIdle. Sessions live in this router
	// copy's memory only (consoleauth.MemoryStore).
	SessionIdle time.Duration
	// TrustedProxies are the CIDRs (or addresses) of the proxies whose
	// X-Forwarded-For and X-Forwarded-Proto are believed
	// (console.trusted_proxies).
	TrustedProxies []string
	// SecureCookies marks the session cookie Secure on every answer
	// (console.secure_cookies).
	SecureCookies bool
	// Limiter throttles wrong logins and bearer tokens; nil means
	// consoleauth's defaults on Now.
	Limiter *consoleauth.Limiter
	// Registry receives the refused-credentials counter; nil registers
	// none.
	Registry prometheus.Registerer
	// AdminTokenEnv names the token's variable in errors; "" means the
	// spec's default.
	AdminTokenEnv string
	// OIDC, when set, lets operators log in as themselves through an
	// OpenID Connect provider (console.oidc); the token stays for
	// automation.
	OIDC *consoleauth.OIDCConfig
	// Logger receives the audit lines; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// The defaults of Config: 120 samples 5 s apart are the last ten minutes.
const (
	DefaultSampleEvery = 5 * time.Second
	DefaultSamples     = 120
	DefaultSessionTTL  = 8 * time.Hour
	// MaxSessionIdle is the longest a router session may sit unused: the
	// router keeps sessions in one copy's memory and cannot tell the other
	// copies of a logout, so its sessions stay short.
	MaxSessionIdle = 15 * time.Minute
)

// SessionCookie is the router console's session cookie. It differs from
// the cells' (cellgate_console): a browser keeps cookies per host, not per
// port, so a router and a cell on one host would overwrite each other's.
const SessionCookie = "cellgate_router_console"

// OIDCFromSpec is consoleauth.OIDCFromSpec, for the router's main: it
// builds Config.OIDC from the spec's console.oidc block.
var OIDCFromSpec = consoleauth.OIDCFromSpec

// Prefix is where the pages live; APIPrefix the JSON.
const (
	Prefix    = router.AdminPath + "/"
	APIPrefix = Prefix + "api/"
)

// Console is the router's console: an http.Handler for /admin and below,
// and Run, its traffic sampler.
type Console struct {
	cfg  Config
	log  *slog.Logger
	auth *consoleauth.Authenticator
	mux  *http.ServeMux

	mu      sync.Mutex // guards traffic
	traffic map[string]*cellSeries
}

// cellSeries is one cell's traffic rings and the counters of its last
// sample (to take the difference).
type cellSeries struct {
	url                string // a cell renamed to another URL is a new backend: counters restart
	requests, refusals *consolechart.Ring
	lastReq, lastRef   uint64
	lastAt             time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var (
	pagesOnce sync.Once
	pages     map[string]*template.Template
	pagesErr  error
)

// New checks cfg and builds a Console.
func New(cfg Config) (*Console, error) {
	cfg.AdminTokenEnv = cmp.Or(cfg.AdminTokenEnv, "CELLGATE_ROUTER_ADMIN_TOKEN")
	if err := consoleauth.CheckToken("router.admin_token_env ("+cfg.AdminTokenEnv+")", cfg.AdminToken); err != nil {
		return nil, err
	}
	if cfg.Source == nil {
		return nil, errors.New("routerconsole: Config.Source is nil")
	}
	if cfg.SampleEvery < 0 || cfg.Samples < 0 || cfg.SessionTTL < 0 || cfg.SessionIdle < 0 {
		return nil, fmt.Errorf("routerconsole: negative SampleEvery (%s), Samples (%d), SessionTTL (%s) or SessionIdle (%s)", cfg.SampleEvery, cfg.Samples, cfg.SessionTTL, cfg.SessionIdle)
	}
	if cfg.SessionIdle == 0 || cfg.SessionIdle > MaxSessionIdle {
		cfg.SessionIdle = MaxSessionIdle
	}
	cfg.SampleEvery = cmp.Or(cfg.SampleEvery, DefaultSampleEvery)
	cfg.Samples = cmp.Or(cfg.Samples, DefaultSamples)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, DefaultSessionTTL)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := parseTemplates(); err != nil {
		return nil, err
	}
	nw, err := consoleauth.NewNetwork(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	m, err := consoleauth.NewMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	store := &consoleauth.MemoryStore{Now: cfg.Now, Idle: cfg.SessionIdle}
	auth, err := consoleauth.New(consoleauth.Config{
		AdminToken: cfg.AdminToken, Store: store, TTL: cfg.SessionTTL, Idle: cfg.SessionIdle, Now: cfg.Now,
		Cookie: SessionCookie, Path: router.AdminPath,
		Network: nw, SecureCookies: cfg.SecureCookies, Limiter: cfg.Limiter, Metrics: m,
		Console: "router", Logger: cfg.Logger, OIDC: cfg.OIDC,
	})
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Logger, auth: auth, traffic: map[string]*cellSeries{}}
	c.mux = c.routes()
	return c, nil
}

// ServeHTTP serves /admin and everything below it; every answer, redirects
// and refusals included, is never cached, sniffed or named in a Referer.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	consoleauth.SetHeaders(w.Header())
	c.mux.ServeHTTP(headerWriter{w}, r)
}

// headerWriter sets the console's headers again as the head is written:
// http.FileServer's and http.Error's answers drop some of them.
type headerWriter struct{ http.ResponseWriter }

func (h headerWriter) WriteHeader(code int) {
	consoleauth.SetHeaders(h.Header())
	h.ResponseWriter.WriteHeader(code)
}

// Run samples the traffic every SampleEvery until ctx ends: the router
// runs it in its own wait group (router.Options.Console), so it stops
// with the router.
func (c *Console) Run(ctx context.Context) {
	c.Sample()
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sample()
		}
	}
}

// Sample takes one traffic sample now: per cell of the map in use, the
// requests and refusals per second since the last sample. A cell's first
// sample only sets its baseline; a cell that left the map loses its rings.
func (c *Console) Sample() {
	cells := c.cfg.Source.Cells()
	now := c.cfg.Now()
	at := now.UTC() // what the JSON shows; now keeps its monotonic reading for the rates
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]bool, len(cells))
	for _, s := range cells {
		seen[s.Name] = true
		cs := c.traffic[s.Name]
		if cs == nil || cs.url != s.URL {
			cs = &cellSeries{url: s.URL, requests: consolechart.NewRing(c.cfg.Samples), refusals: consolechart.NewRing(c.cfg.Samples)}
			c.traffic[s.Name] = cs
			cs.lastReq, cs.lastRef, cs.lastAt = s.Requests, s.Refusals.Total(), now
			continue
		}
		req, ref := s.Requests, s.Refusals.Total()
		secs := now.Sub(cs.lastAt).Seconds()
		cs.requests.Add(at, consolechart.Rate(req, cs.lastReq, secs))
		cs.refusals.Add(at, consolechart.Rate(ref, cs.lastRef, secs))
		cs.lastReq, cs.lastRef, cs.lastAt = req, ref, now
	}
	for name := range c.traffic {
		if !seen[name] {
			delete(c.traffic, name)
		}
	}
}

// Traffic is the sampled traffic of every cell (the JSON of
// /admin/api/traffic).
type Traffic struct {
	// Interval is the sampling period; Samples the points kept per series.
	Interval string        `json:"interval"`
	Samples  int           `json:"samples"`
	Cells    []CellTraffic `json:"cells"`
}

// CellTraffic is one cell's series, oldest sample first.
type CellTraffic struct {
	Name               string  `json:"name"`
	RequestsPerSecond  []Point `json:"requests_per_second"`
	RefusalsPerSecond  []Point `json:"refusals_per_second"`
	requests, refusals []consolechart.Point
}

// Point is one sample (in UTC); V is null where nothing could be measured.
type Point = consolechart.JSONPoint

// traffic copies the rings out under the lock, in the map's cell order.
func (c *Console) trafficNow(order []router.CellStatus) Traffic {
	out := Traffic{Interval: c.cfg.SampleEvery.String(), Samples: c.cfg.Samples, Cells: []CellTraffic{}}
	c.mu.Lock()
	for _, s := range order {
		cs := c.traffic[s.Name]
		ct := CellTraffic{Name: s.Name}
		if cs != nil {
			ct.requests = cs.requests.Points(nil)
			ct.refusals = cs.refusals.Points(nil)
		}
		out.Cells = append(out.Cells, ct)
	}
	c.mu.Unlock()
	for i := range out.Cells {
		out.Cells[i].RequestsPerSecond = consolechart.JSONPoints(out.Cells[i].requests)
		out.Cells[i].RefusalsPerSecond = consolechart.JSONPoints(out.Cells[i].refusals)
	}
	return out
}

// charts draws the traffic and refusal charts over the sampled window.
func (c *Console) charts(t Traffic) (traffic, refusals template.HTML) {
	req := make([]consolechart.Series, len(t.Cells))
	ref := make([]consolechart.Series, len(t.Cells))
	for i, ct := range t.Cells {
		req[i] = consolechart.Series{Label: ct.Name, Points: ct.requests}
		ref[i] = consolechart.Series{Label: ct.Name, Points: ct.refusals}
	}
	traffic = consolechart.Time(consolechart.TimeOptions{ID: "traffic-chart", Title: "Requests per second by cell", Unit: "req/s"}, req...)
	refusals = consolechart.Time(consolechart.TimeOptions{ID: "refusals-chart", Title: "Router refusals per second by cell", Unit: "/s", Height: 160}, ref...)
	return traffic, refusals
}

// staticFiles serves the stylesheet and nothing that is a directory, so
// /admin/static/ lists nothing.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	return http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(noDirs{sub})))
}

// noDirs is an fs.FS that opens files only.
type noDirs struct{ fs.FS }

func (n noDirs) Open(name string) (fs.File, error) {
	f, err := n.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, fs.ErrNotExist
	}
	return f, nil
}
