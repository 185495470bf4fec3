package console

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
)

// Database is one jobs database as the console reads and changes it. A
// *pgjobs.DB is one. A Database that also implements
// jobs.QueuePauser can have its queues paused and resumed from the console;
// for one that does not, those actions answer 501.
type Database interface {
	// Name is the database's name ("control" or a shard name).
	Name() string
	// Ready reports whether its jobs table exists.
	Ready() bool
	// List returns the jobs matching f, newest (highest id) first.
	List(ctx context.Context, f pgjobs.ListFilter) ([]pgjobs.JobInfo, error)
	// Job returns one job (pgjobs.ErrJobNotFound when there is none).
	Job(ctx context.Context, id jobs.JobID) (pgjobs.JobInfo, error)
	// RetryJob, CancelJob and DeleteJob act on one job
	// (pgjobs.ErrJobState when its state does not allow it).
	RetryJob(ctx context.Context, id jobs.JobID) error
	CancelJob(ctx context.Context, id jobs.JobID) error
	DeleteJob(ctx context.Context, id jobs.JobID) error
	// Operate applies an action to many jobs at once and returns how many
	// it changed (the bulk actions).
	Operate(ctx context.Context, act pgjobs.Act, ids []jobs.JobID) (int, error)
	// Depths counts the jobs of every queue by state.
	Depths(ctx context.Context) ([]pgjobs.QueueDepth, error)
	// Backlogs counts the given tenants' jobs by state, with the totals.
	Backlogs(ctx context.Context, tenants []string) ([]pgjobs.TenantBacklog, pgjobs.JobTotals, error)
	// TenantBacklogs counts the given tenants' jobs by state, reading only
	// their rows (the sampler's query: no totals).
	TenantBacklogs(ctx context.Context, tenants []string) ([]pgjobs.TenantBacklog, error)
	// Stats counts the waiting and running jobs per queue from the claim
	// indexes (the queue-depth metric's count, not a table scan).
	Stats(ctx context.Context) ([]jobs.QueueStats, error)
}

// Config is what a Console serves and how it guards it.
type Config struct {
	// AdminToken reads (required: without it there is no console).
	AdminToken string
	// OperatorToken reads and acts; "" means no token may act (people
	// mapped to the operator role through OIDC still may).
	OperatorToken string
	// Databases are the cell's jobs databases, control first.
	Databases []Database
	// DatabaseTimeout bounds each database's part of a read; a database
	// slower than this is reported as failed. 0 means DefaultDatabaseTimeout.
	DatabaseTimeout time.Duration
	// SessionTTL is the longest a login lasts. 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// SessionIdle ends a session unused for this long. 0 means
	// DefaultSessionIdle.
	SessionIdle time.Duration
	// Sessions keeps the sessions: a *PGSessions on the control database
	// in a cell, so a logout ends a session in every process at once; nil
	// means a consoleauth.MemoryStore (one process only).
	Sessions consoleauth.Store
	// TrustedProxies are the CIDRs (or addresses) of the proxies whose
	// X-Forwarded-For and X-Forwarded-Proto are believed
	// (console.trusted_proxies); from any other peer they are ignored.
	TrustedProxies []string
	// SecureCookies marks the session cookie Secure on every answer
	// (console.secure_cookies), not only over TLS.
	SecureCookies bool
	// Limiter throttles failed logins and bad bearer tokens; nil means
	// consoleauth's defaults on Now.
	Limiter *consoleauth.Limiter
	// Registry receives the console's metrics (the refused credentials);
	// nil registers none.
	Registry prometheus.Registerer
	// AdminTokenEnv and OperatorTokenEnv name the tokens' environment
	// variables in errors; "" means the spec's defaults.
	AdminTokenEnv, OperatorTokenEnv string
	// Spec is the cell's config: the slot map, the cells and the job lanes
	// come from it.
	Spec config.Config
	// ShardMap, when set, returns the cell's shard map in force (the
	// control database's record, installed live); the cells page and the
	// tenants view show it instead of the spec's database.shards, which a
	// move between the cell's shards leaves behind.
	ShardMap func() ShardMap
	// Admission returns the admission report (JSON-encodable); nil leaves
	// the admission page empty.
	Admission func() any
	// Rejections holds the tenants the tenant bulkhead refuses most (fed by
	// runtime.Options.OnTenantRejection); nil leaves the tenants view
	// without rejections.
	Rejections *TopK
	// InFlight returns a tenant's requests in flight and its cap (0 = no
	// cap), read without a lock from the tenant request engine
	// (admission.Engine.InFlightOf); nil leaves them out of the tenants view.
	// With Plans the cap shown is the tenant's plan's, not this one.
	InFlight func(tenant string) (inFlight, limit int64)
	// Plans is the cell's tenant table over the spec's plans (the store
	// the runtime enforces); the tenants view shows each tenant's plan and
	// limits from it and the operator role changes them through it
	// (Store.Apply, as `server tenants set` does). nil (tenancy off): no
	// plans are shown and changing one answers 501.
	Plans *plans.Store
	// LimitCounts holds each tenant's refusals and shadow refusals per
	// resource (fed by runtime.Options.OnTenantLimit); nil leaves them out
	// of the tenants view.
	LimitCounts *LimitCounts
	// Workers appends to dst the job each worker runs now (0 = idle), in
	// worker order (jobs.Client.WorkerJobs); nil leaves the lanes without
	// busy counts.
	Workers func(dst []jobs.JobID) []jobs.JobID
	// Completed returns the job attempts this process's workers completed
	// since start (jobs.Client.Completed): the cell's throughput series.
	// nil leaves that series empty.
	Completed func() uint64
	// SampleEvery is the sampler's period (RunSampler); 0 means
	// DefaultSampleEvery. The series keep SeriesPoints samples.
	SampleEvery time.Duration
	// OIDC, when set, lets operators log in as themselves through an
	// OpenID Connect provider (console.oidc); the tokens stay for
	// automation.
	OIDC *consoleauth.OIDCConfig
	// Logger receives the audit lines; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock (sessions, ages, the queue counts' cache); nil means
	// time.Now.
	Now func() time.Time
}

// The defaults of Config.
const (
	DefaultDatabaseTimeout = 2 * time.Second
	DefaultSessionTTL      = 8 * time.Hour
	DefaultSessionIdle     = 30 * time.Minute
	DefaultSampleEvery     = 10 * time.Second
)

// Console serves the operator console of one cell.
type Console struct {
	cfg   Config
	log   *slog.Logger
	dbs   map[string]Database
	slots SlotReport
	place placement
	auth  *consoleauth.Authenticator
	// confirmKey signs bulk confirmations; derived from the operator
	// token, so every process of the cell accepts another's.
	confirmKey []byte
	bulk       bulkOps
	// counts caches each database's queue counts (counts.go).
	counts *countCache
	// ser holds the sampled series the charts draw (RunSampler fills it).
	ser *sampler
}

// New checks cfg and builds a Console.
func New(cfg Config) (*Console, error) {
	if cfg.AdminTokenEnv == "" {
		cfg.AdminTokenEnv = "CELLGATE_ADMIN_TOKEN"
	}
	if cfg.OperatorTokenEnv == "" {
		cfg.OperatorTokenEnv = "CELLGATE_OPERATOR_TOKEN"
	}
	if err := consoleauth.CheckToken("server.admin_token_env ("+cfg.AdminTokenEnv+")", cfg.AdminToken); err != nil {
		return nil, err
	}
	if cfg.OperatorToken != "" {
		if err := consoleauth.CheckToken("server.operator_token_env ("+cfg.OperatorTokenEnv+")", cfg.OperatorToken); err != nil {
			return nil, err
		}
	}
	if cfg.OperatorToken == cfg.AdminToken {
		return nil, fmt.Errorf("server.operator_token_env (%s): the operator token must differ from the admin token (server.admin_token_env, %s)", cfg.OperatorTokenEnv, cfg.AdminTokenEnv)
	}
	if cfg.SessionIdle < 0 || cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("console: negative SessionTTL (%s) or SessionIdle (%s)", cfg.SessionTTL, cfg.SessionIdle)
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.DatabaseTimeout <= 0 {
		cfg.DatabaseTimeout = DefaultDatabaseTimeout
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Sessions == nil {
		cfg.Sessions = &consoleauth.MemoryStore{Now: cfg.Now, Idle: cfg.SessionIdle}
	}
	c := &Console{cfg: cfg, log: cfg.Logger, dbs: make(map[string]Database, len(cfg.Databases)), counts: newCountCache(cfg.Now)}
	for _, db := range cfg.Databases {
		if _, dup := c.dbs[db.Name()]; dup {
			return nil, fmt.Errorf("console: database %q given twice", db.Name())
		}
		c.dbs[db.Name()] = db
	}
	rep, place, err := slotReport(cfg.Spec)
	if err != nil {
		return nil, err
	}
	c.slots, c.place = rep, place
	c.ser = newSampler(len(cfg.Databases))
	if c.auth, err = newAuthenticator(cfg); err != nil {
		return nil, err
	}
	c.confirmKey = confirmKey(cfg.OperatorToken, cfg.OIDC)
	if err := parseTemplates(); err != nil {
		return nil, err
	}
	return c, nil
}

// Close ends the queue counts the console runs in the background (each
// under CountTimeout, and the next ones that keep the counts warm) and
// waits for them, so none reads a database its owner is closing. The
// sampler is not among them: its owner stops it (RunSampler). Pages and
// the API still answer after Close, but a reader that needs a new count
// gets an error for that database.
func (c *Console) Close() { c.counts.close() }

// Register adds the console's routes to e: the API under APIPrefix, the
// pages under Prefix. They sit outside the tenant chain: operators are no
// tenant.
func (c *Console) Register(e *echo.Echo) {
	c.registerAPI(e)
	c.registerUI(e)
}

// Prefix is where the pages live; APIPrefix where the JSON API lives.
const (
	Prefix    = "/admin/"
	APIPrefix = "/admin/api/"
)
