package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

func TestWriteStatus(t *testing.T) {
	app := migrationTarget{schema: schemaApp}
	jobs := migrationTarget{db: "control", schema: schemaJobs}
	at := func(db string) migrationTarget { t := app; t.db = db; return t }
	rows := []statusRow{
		{target: jobs, state: dbmigrate.State{Applied: true, Version: 1, Latest: 1, File: "000001_jobs.up.sql", Previous: -1}},
		{target: at("shard-0"), state: dbmigrate.State{Applied: true, Version: 2, Dirty: true, Latest: 2, File: "000002_add_x.up.sql", Previous: 1}},
		{target: at("shard-1"), state: dbmigrate.State{Applied: true, Version: 1, Latest: 2, Pending: []string{"000002_add_x.up.sql"}, Previous: -1}},
		{target: at("shard-2"), err: errors.New("connection refused")},
		{target: at("shard-3"), state: dbmigrate.State{Latest: 2, Pending: []string{"000001_a.up.sql", "000002_add_x.up.sql"}, Previous: -1}},
	}
	var out bytes.Buffer
	bad := writeStatus(&out, rows)
	if bad != 2 {
		t.Errorf("bad = %d, want 2 (one dirty, one unreachable)", bad)
	}
	want := `DATABASE  SCHEMA  VERSION  STATE
control   jobs    1/1      up to date
shard-0   app     2/2      DIRTY: 000002_add_x.up.sql failed; repair: undo what 000002_add_x.up.sql applied on shard-0, fix the file, run ` + "`server migrate -db shard-0 force 1`" + `, then restart (or ` + "`server migrate up`" + `)
shard-1   app     1/2      behind: 1 pending (000002_add_x.up.sql)
shard-2   app     ?        unreachable: connection refused
shard-3   app     -/2      behind: 2 pending (000001_a.up.sql, 000002_add_x.up.sql)
the app schema is not at one version on every database: apply or repair the ones above that are not up to date
`
	if out.String() != want {
		t.Fatalf("status:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestRepairHintNamesTheSchema(t *testing.T) {
	h := repairHint(migrationTarget{db: "control", schema: schemaJobs}, &dbmigrate.Error{Version: 1, Previous: -1})
	if !strings.Contains(h, "`server migrate -db control -schema jobs force -1`") || !strings.Contains(h, "version 1") {
		t.Fatalf("hint = %q", h)
	}
}

func TestFilterTargets(t *testing.T) {
	all := []migrationTarget{{db: "control", schema: schemaJobs}, {db: "shard-0", schema: schemaApp}, {db: "shard-0", schema: schemaJobs}}
	got, err := filterTargets(all, "shard-0")
	if err != nil || len(got) != 2 {
		t.Fatalf("filter shard-0 = %v, %v", got, err)
	}
	if _, err := filterTargets(all, "shard-9"); err == nil || !strings.Contains(err.Error(), "databases: control, shard-0") {
		t.Fatalf("unknown -db: %v", err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestProgressStopsOnFailedMigration: a file PostgreSQL rejects stops the
// run at once (no retry), and the readiness check names the database, the
// file, PostgreSQL's error and the repair; the databases after it are not
// touched.
func TestProgressStopsOnFailedMigration(t *testing.T) {
	ctx := context.Background()
	bad := dbmigrate.Files{Table: "schema_migrations", Dir: "m", FS: fstest.MapFS{
		"m/000001_a.up.sql":     {Data: []byte("CREATE TABLE a (id int);")},
		"m/000002_add_x.up.sql": {Data: []byte("ALTER TABLE nope ADD COLUMN x int;")},
	}}
	targets := []migrationTarget{
		{db: "shard-0", dsn: testpg.CreateDB(t, "prog0"), schema: schemaApp, files: bad},
		{db: "shard-1", dsn: testpg.CreateDB(t, "prog1"), schema: schemaApp, files: bad},
	}
	p := &migrationProgress{}
	if err := p.check(ctx); err == nil {
		t.Fatal("ready before running")
	}
	slept := 0
	err := p.run(ctx, targets, quiet(), func(context.Context, time.Duration) error { slept++; return nil })
	if !dbmigrate.IsFailed(err) || slept != 0 || p.applied() {
		t.Fatalf("run = %v after %d sleeps (applied %v); want a failure without retry", err, slept, p.applied())
	}
	msg := p.check(ctx).Error()
	for _, want := range []string{"shard-0:", "000002_add_x.up.sql", `relation "nope" does not exist`, "force 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("readiness %q lacks %q", msg, want)
		}
	}
	if st, err := bad.Status(ctx, targets[1].dsn); err != nil || st.Applied {
		t.Fatalf("shard-1 after the failure on shard-0: %+v, %v", st, err)
	}
}

// TestProgressRetriesUnreachable: a database that cannot be reached is
// retried with backoff (not reported as failed) until ctx ends.
func TestProgressRetriesUnreachable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	targets := []migrationTarget{{db: "shard-0", dsn: "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", schema: schemaApp,
		files: dbmigrate.Files{Table: "schema_migrations", Dir: "m", FS: fstest.MapFS{"m/000001_a.up.sql": {Data: []byte("SELECT 1;")}}}}}
	p := &migrationProgress{}
	var delays []time.Duration
	err := p.run(ctx, targets, quiet(), func(_ context.Context, d time.Duration) error {
		delays = append(delays, d)
		if len(delays) == 3 {
			msg := p.check(ctx).Error()
			if !strings.Contains(msg, "shard-0 unreachable") {
				t.Errorf("readiness while unreachable = %q", msg)
			}
			cancel()
			return ctx.Err()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(delays) != 3 || delays[1] != 2*delays[0] {
		t.Fatalf("run = %v, delays %v; want backoff until cancelled", err, delays)
	}
}

// TestJobsReadiness: the jobs check never claims tables are being created
// when the runtime has not started or its migration failed.
func TestJobsReadiness(t *testing.T) {
	if err := jobsReadiness(false, []string{"control"}, nil); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("before the app's migrations: %v", err)
	}
	fail := &dbmigrate.Error{Version: 1, File: "000001_jobs.up.sql", Previous: -1, Err: errors.New("ERROR: boom (SQLSTATE XX000)")}
	err := jobsReadiness(true, []string{"control", "shard-1"}, map[string]error{"control": fail})
	if err == nil {
		t.Fatal("ready with a failed migration")
	}
	msg := err.Error()
	for _, want := range []string{"control: migration 000001_jobs.up.sql failed: ERROR: boom", "server migrate -db control -schema jobs force -1", "still being created on [shard-1]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "[control") {
		t.Errorf("%q says the failed database is still being created", msg)
	}
	if err := jobsReadiness(true, nil, nil); err != nil {
		t.Fatalf("all ready: %v", err)
	}
}

// TestIdempotencyMigrationTargets: with an idempotent route the keys
// table's migrations go to every shard after the app's, never to the
// control database; without one, nowhere.
func TestIdempotencyMigrationTargets(t *testing.T) {
	cfg := spec.Config()
	set, err := shards.Open(context.Background(), cfg.Database, func(string) string { return "postgres://127.0.0.1:1/none" })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var got []string
	for _, tg := range migrationTargets(cfg, set, schemaApp, schemaIdempotency) {
		got = append(got, tg.db+"/"+tg.schema)
	}
	want := "shard-0/app shard-0/idempotency shard-1/app shard-1/idempotency"
	if !cfg.IdempotentRoutes() || strings.Join(got, " ") != want {
		t.Fatalf("targets %v, want %s", got, want)
	}
	for i := range cfg.Routes {
		cfg.Routes[i].Idempotent = false
	}
	for _, tg := range migrationTargets(cfg, set, schemaApp, schemaIdempotency) {
		if tg.schema == schemaIdempotency {
			t.Fatalf("no idempotent route, yet %s/%s", tg.db, tg.schema)
		}
	}
}
