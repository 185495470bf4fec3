// Package consoletest builds a console over real PostgreSQL databases for
// tests: a control database and two shards, each migrated with the job
// backend's schema and seeded with jobs, served by an httptest server. The
// API tests and the browser tests (tests/browser) share it.
//
// Concurrency: an Env is used by one test; its methods are not meant for
// concurrent use.
package consoletest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/testpg"
)

// The tokens of every Env.
const (
	AdminToken    = "admin-token-for-tests-0123456789abcdef"
	OperatorToken = "operator-token-for-tests-0123456789abcdef"
)

// Env is a running console over three real databases.
type Env struct {
	// URL is the console server's base URL (no trailing slash).
	URL string
	// Console is the console under test.
	Console *console.Console
	// Databases are control, shard-0 and shard-1 (and "slow" when asked).
	Databases []*pgjobs.DB
	// Audit holds the log lines the console wrote.
	Audit *Log
	// Rejections feeds the tenants view (as the bulkhead does in a cell).
	Rejections *console.TopK
	// Plans is the tenant table's store the console reads and changes,
	// and LimitCounts its per-tenant refusal counts (feed them as the
	// runtime does); both nil unless Options.Plans is set.
	Plans       *plans.Store
	LimitCounts *console.LimitCounts

	tb    testing.TB
	cfg   console.Config
	dsns  map[string]string
	pools map[string]*pgxpool.Pool
}

// Log collects log lines; safe for concurrent use (bulk actions log from
// their own goroutines).
type Log struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Options change what New builds.
type Options struct {
	// Slow adds a database named "slow" whose server accepts connections
	// and never answers.
	Slow bool
	// DatabaseTimeout is the console's per-database timeout (0 = 1s).
	DatabaseTimeout time.Duration
	// Plans, when set, are the cell's tenant plans (tenancy.plans, the
	// first the default): the tenant table is migrated into the control
	// database and a running plans.Store over it is the console's
	// Config.Plans (Env.Plans), with a LimitCounts (Env.LimitCounts).
	Plans []config.Plan
	// Configure, when set, changes the console's Config last (a clock,
	// the functions cmd/server hands over, the spec's jobs block).
	Configure func(*console.Config)
}

// New builds and starts an Env; everything is closed and dropped in
// tb.Cleanup.
func New(tb testing.TB, o Options) *Env {
	tb.Helper()
	e := &Env{tb: tb, Audit: &Log{}, Rejections: console.NewTopK(16), dsns: map[string]string{}, pools: map[string]*pgxpool.Pool{}}
	ctx := context.Background()
	for _, name := range []string{"control", "shard-0", "shard-1"} {
		dsn := testpg.CreateDB(tb, "console_"+name)
		if err := pgjobs.Migrate(ctx, dsn); err != nil {
			tb.Fatalf("migrate %s: %v", name, err)
		}
		e.dsns[name] = dsn
		e.addBackend(name, dsn)
	}
	if o.Slow {
		e.addBackend("slow", "postgres://postgres@"+blackhole(tb)+"/slow?sslmode=disable&connect_timeout=30")
	}
	if o.DatabaseTimeout == 0 {
		o.DatabaseTimeout = time.Second
	}
	dbs := make([]console.Database, len(e.Databases))
	for i, b := range e.Databases {
		dbs[i] = b
	}
	spec := config.Config{
		Server:   config.Server{Cell: "cell-1"},
		Database: config.Database{Shards: []config.Shard{{Name: "shard-0"}, {Name: "shard-1"}}},
		Cells:    []config.Cell{{Name: "cell-1", URL: "http://127.0.0.1:8080"}},
		Jobs:     config.Jobs{Backend: "postgres", Workers: 4, Postgres: config.JobsPostgres{Claim: "fair"}},
	}
	cfg := console.Config{
		AdminToken:      AdminToken,
		OperatorToken:   OperatorToken,
		Databases:       dbs,
		DatabaseTimeout: o.DatabaseTimeout,
		Spec:            spec,
		Rejections:      e.Rejections,
		Admission:       func() any { return map[string]any{"server": map[string]int{"in_flight": 0}} },
		Logger:          slog.New(slog.NewTextHandler(e.Audit, nil)),
		// Sessions in the control database, as in a cell.
		Sessions: console.NewPGSessions(e.pools["control"], e.dsns["control"], console.DefaultSessionIdle),
	}
	if len(o.Plans) > 0 {
		cfg.Spec.Tenancy.Enabled = true
		cfg.Spec.Tenancy.Plans, cfg.Spec.Tenancy.DefaultPlan = o.Plans, o.Plans[0].Name
		e.Plans = e.runPlans(cfg.Spec)
		e.LimitCounts = console.NewLimitCounts(64)
		cfg.Plans, cfg.LimitCounts = e.Plans, e.LimitCounts
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	e.cfg = cfg
	e.Console, e.URL = e.serve(cfg)
	return e
}

// runPlans migrates the tenant table into the control database and runs a
// store over it until the test ends, as cmd/server does.
func (e *Env) runPlans(spec config.Config) *plans.Store {
	ctx := context.Background()
	if err := plans.Migrate(ctx, e.dsns["control"]); err != nil {
		e.tb.Fatalf("tenant table migrations: %v", err)
	}
	cat, err := plans.NewCatalog(spec)
	if err != nil {
		e.tb.Fatal(err)
	}
	st := plans.NewStore(e.pools["control"], cat, plans.Options{Log: slog.New(slog.DiscardHandler)})
	if err := st.Load(ctx); err != nil {
		e.tb.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = st.Run(rctx) }()
	e.tb.Cleanup(func() { cancel(); <-done })
	return st
}

// serve starts a console with cfg behind an httptest server.
func (e *Env) serve(cfg console.Config) (*console.Console, string) {
	c, err := console.New(cfg)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(c.Close)
	ec := echo.New()
	c.Register(ec)
	srv := httptest.NewServer(ec)
	e.tb.Cleanup(srv.Close)
	return c, srv.URL
}

// Another starts a second console over the same databases, as another
// process of the cell (its own memory, the same control database), and
// returns its base URL.
func (e *Env) Another() string {
	cfg := e.cfg
	cfg.Sessions = console.NewPGSessions(e.pools["control"], e.dsns["control"], console.DefaultSessionIdle)
	_, u := e.serve(cfg)
	return u
}

func (e *Env) addBackend(name, dsn string) {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(pool.Close)
	b, err := pgjobs.NewDB(pool, pgjobs.Config{}, pgjobs.Options{Name: name})
	if err != nil {
		e.tb.Fatal(err)
	}
	e.pools[name] = pool
	e.Databases = append(e.Databases, b)
}

// Pool returns the connection pool of one database (control, shard-0,
// shard-1), for loading data in bulk or reading it back.
func (e *Env) Pool(database string) *pgxpool.Pool { return e.pools[database] }

// blackhole listens on loopback, accepts connections and never answers.
func blackhole(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// Job is a job to seed.
type Job struct {
	Kind, Queue, Tenant string
	// State is the job's state ("" = available).
	State pgjobs.State
	// Attempt and MaxAttempts (0 = 5).
	Attempt, MaxAttempts int
	// Errors are the failed attempts' messages, oldest first.
	Errors []string
	// Age is how long ago it was created.
	Age time.Duration
}

// Seed inserts jobs into one database and returns their ids in order.
func (e *Env) Seed(database string, jobs ...Job) []int64 {
	e.tb.Helper()
	ctx := context.Background()
	var ids []int64
	now := time.Now()
	for _, j := range jobs {
		if j.State == "" {
			j.State = pgjobs.StateAvailable
		}
		if j.MaxAttempts == 0 {
			j.MaxAttempts = 5
		}
		if j.Queue == "" {
			j.Queue = "default"
		}
		errs := make([]map[string]any, len(j.Errors))
		for i, m := range j.Errors {
			errs[i] = map[string]any{"attempt": i + 1, "at": now.Add(-j.Age).Add(time.Duration(i+1) * time.Second), "error": m}
		}
		var finished *time.Time
		if j.State == pgjobs.StateCompleted || j.State == pgjobs.StateFailed {
			finished = &now
		}
		var id int64
		err := e.pools[database].QueryRow(ctx, `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, state, attempt, max_attempts, run_at, created_at, errors, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10) RETURNING id`,
			j.Kind, j.Queue, j.Tenant, fmt.Sprintf(`{"email":%q}`, j.Tenant+"@example.com"), string(j.State),
			j.Attempt, j.MaxAttempts, now.Add(-j.Age), errs, finished).Scan(&id)
		if err != nil {
			e.tb.Fatalf("seed %s: %v", database, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// MakeUnavailable stops a database from taking connections and ends the
// ones it has: its next query fails, as when its server is down.
func (e *Env) MakeUnavailable(database string) {
	e.tb.Helper()
	e.allowConnections(database, false)
	e.pools[database].Reset()
}

// MakeAvailable undoes MakeUnavailable: the database takes connections
// again.
func (e *Env) MakeAvailable(database string) {
	e.tb.Helper()
	e.allowConnections(database, true)
}

// allowConnections lets a database take connections or not; not also ends
// the ones it has.
func (e *Env) allowConnections(database string, allow bool) {
	e.tb.Helper()
	name := strings.TrimPrefix(mustURL(e.tb, e.dsns[database]).Path, "/")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testpg.Server())
	if err != nil {
		e.tb.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t", pgx.Identifier{name}.Sanitize(), allow)); err != nil {
		e.tb.Fatal(err)
	}
	if allow {
		return
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		e.tb.Fatal(err)
	}
}

func mustURL(tb testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}
