package pgjobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	cgsql "github.com/cellgate/cellgate/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

// baseDSN is the server the tests create their databases on.
func baseDSN() string { return testpg.Server() }

// dbName is the database named by dsn.
func dbName(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// adminExec runs one statement on the base database. A PostgreSQL that is
// down fails the test: these tests never skip.
func adminExec(tb testing.TB, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, baseDSN())
	if err != nil {
		tb.Fatalf("PostgreSQL at %s is required for this test: %v", baseDSN(), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// newDB creates an empty database and drops it at cleanup; it returns its DSN.
func newDB(tb testing.TB) string {
	tb.Helper()
	return testpg.CreateDB(tb, "pgjobs")
}

// newMigratedDB is newDB with the job backend's migrations (Migrate)
// applied, and nothing else: the backend needs none of the app's tables.
func newMigratedDB(tb testing.TB) string {
	tb.Helper()
	dsn := newDB(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Migrate(ctx, dsn); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return dsn
}

// newPool opens a pool on dsn, closed at cleanup. schema, if set, becomes
// the search_path.
func newPool(tb testing.TB, dsn, schema string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	pc.MaxConns = maxConns
	if schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = schema
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// newSchema creates a schema in the database at dsn and applies the jobs
// migration to it, so many backends can share one test database without
// sharing a table. It returns a pool whose search_path is the schema.
func newSchema(tb testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	schema := randName("s")
	pool := newPool(tb, dsn, schema, maxConns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	for _, f := range jobsMigrationsUp {
		up, err := fs.ReadFile(migrations, f)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(up)); err != nil {
			tb.Fatalf("jobs migration %s in schema %s: %v", f, schema, err)
		}
	}
	return pool
}

// jobsMigrationsUp are the job backend's embedded up files, in order.
var jobsMigrationsUp = func() []string {
	names, err := fs.Glob(migrations, "migrations/*.up.sql")
	if err != nil || len(names) == 0 {
		panic(fmt.Sprintf("no jobs migrations embedded: %v", err))
	}
	sort.Strings(names)
	return names
}()

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger logs to t, for tests that want to see the backend's complaints.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func count(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	tb.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}

// cell is a test cell: a control database and shards with the app's
// migrations applied, as the server applies them at boot; the jobs tables
// are not there yet (the Backend migrates them).
type cell struct {
	set  *shards.Set
	dsns map[string]string // by database name in the runtime: control, shard-0, …
}

func newCell(tb testing.TB, nShards, maxConns int) *cell {
	tb.Helper()
	env := map[string]string{"CONTROL_DSN": newDB(tb)}
	if err := cgsql.Migrate(context.Background(), env["CONTROL_DSN"]); err != nil {
		tb.Fatalf("app migrations on control: %v", err)
	}
	db := config.Database{Control: config.ControlDB{Name: "control", DSNEnv: "CONTROL_DSN", MaxConns: maxConns}}
	c := &cell{dsns: map[string]string{"control": env["CONTROL_DSN"]}}
	for i := range nShards {
		name := fmt.Sprintf("shard-%d", i)
		envName := fmt.Sprintf("S%d_DSN", i)
		env[envName] = newDB(tb)
		c.dsns[name] = env[envName]
		if err := cgsql.Migrate(context.Background(), env[envName]); err != nil {
			tb.Fatalf("app migrations on %s: %v", name, err)
		}
		db.Shards = append(db.Shards, config.Shard{Name: name, DSNEnv: envName, MaxConns: maxConns})
	}
	set, err := shards.Open(context.Background(), db, func(k string) string { return env[k] })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(set.Close)
	c.set = set
	return c
}

// cellRuntime is a cell's job runtime as the server builds it: a Backend over
// the cell's databases and the Client that drives it.
type cellRuntime struct {
	*jobs.Client
	*Backend
}

// newRuntime builds a runtime over set; jcfg.Workers is per database, as
// the spec's jobs.workers.
func newRuntime(ctx context.Context, set *shards.Set, cfg Config, jcfg jobs.Config, w *jobs.Workers, o jobs.Options) (*cellRuntime, error) {
	b, err := New(set, cfg, Options{Logger: o.Logger, Registry: o.Registry})
	if err != nil {
		return nil, err
	}
	jcfg.Workers = jcfg.WithDefaults().Workers * len(b.Databases())
	c, err := jobs.NewClient(ctx, jcfg, b, w, o)
	if err != nil {
		return nil, err
	}
	return &cellRuntime{c, b}, nil
}

// waitReady waits until the runtime has migrated every database.
func waitReady(tb testing.TB, r *cellRuntime) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(r.NotReady()) > 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("databases not ready after 60s: %v", r.NotReady())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventually polls cond every few milliseconds until it holds or d passes.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(3 * time.Millisecond)
	}
}
