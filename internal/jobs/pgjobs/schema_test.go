package pgjobs

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// update rewrites testdata/schema.golden from what the migrations build now.
// Use it only when a new migration changes the schema on purpose, and read
// the diff: the golden is the schema every database already migrated has.
var update = flag.Bool("update", false, "rewrite testdata/schema.golden from the current migrations")

const goldenFile = "testdata/schema.golden"

// TestSchemaGolden: the embedded migrations build exactly the catalog
// recorded in testdata/schema.golden. The golden was first generated from
// the jobs migrations as they were in the app's sql/migrations (000002_jobs,
// 000003_jobs_claim_quantum and 000004_jobs_fair_vtime, applied in order),
// so it pinned that 000001_jobs, their squash, has the same end state; it
// was then rewritten for 000002_queue_pause (a table and the claim
// function's paused-queue filters, nothing else) and 000003_console_indexes
// (two indexes).
func TestSchemaGolden(t *testing.T) {
	dsn := newMigratedDB(t)
	got := catalog(t, dsn)
	if *update {
		if err := os.WriteFile(goldenFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the migrations' catalog differs from %s (go test -run TestSchemaGolden -update rewrites it; read the diff):\n%s",
			goldenFile, lineDiff(string(want), got))
	}
}

// TestMigrationDownUp: the down migrations remove everything the up
// migrations made (only the migrations table is left), the up migrations
// apply again to the same catalog, and a second Migrate is a no-op.
func TestMigrationDownUp(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := catalog(t, dsn)
	if err := Files.Down(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left []string
	rows, err := conn.Query(ctx, `
SELECT 'relation ' || c.relname FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relname NOT IN ($1::name, ($1 || '_pkey')::name)
UNION ALL
SELECT 'function ' || p.proname FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace
UNION ALL
SELECT 'type ' || t.typname FROM pg_type t
WHERE t.typnamespace = 'public'::regnamespace AND t.typname NOT IN ($1::name, ('_' || $1)::name)
ORDER BY 1`, MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("after down, left behind: %v", left)
	}
	for i := 0; i < 2; i++ {
		if err := Migrate(ctx, dsn); err != nil {
			t.Fatalf("up after down, run %d: %v", i, err)
		}
	}
	if after := catalog(t, dsn); after != before {
		t.Fatalf("up after down built another catalog:\n%s", lineDiff(before, after))
	}
}

// TestMigrationDownOneStep: undoing each migration leaves exactly the
// catalog the database had before it (for 000002_queue_pause, the claim
// function's body as 000001 made it), and redoing it gives the same
// catalog as the first time. Each file is checked on its own, so a down
// file that leaves something behind is found even when a later one hides
// it from TestMigrationDownUp.
func TestMigrationDownOneStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	files, err := Files.List()
	if err != nil {
		t.Fatal(err)
	}
	dsn := newDB(t)
	// at[v] is the catalog at version files[v].Version.
	at := make([]string, len(files))
	for v := range files {
		if err := Files.Steps(ctx, dsn, 1); err != nil {
			t.Fatal(err)
		}
		at[v] = catalog(t, dsn)
		if v > 0 && at[v] == at[v-1] {
			t.Fatalf("%06d changed nothing in the catalog", files[v].Version)
		}
	}
	for v := len(files) - 1; v > 0; v-- {
		if err := Files.Steps(ctx, dsn, -1); err != nil {
			t.Fatal(err)
		}
		if got := catalog(t, dsn); got != at[v-1] {
			t.Fatalf("down from %06d left another catalog than %06d's:\n%s", files[v].Version, files[v-1].Version, lineDiff(at[v-1], got))
		}
	}
	for v := 1; v < len(files); v++ {
		if err := Files.Steps(ctx, dsn, 1); err != nil {
			t.Fatal(err)
		}
		if got := catalog(t, dsn); got != at[v] {
			t.Fatalf("%06d again built another catalog:\n%s", files[v].Version, lineDiff(at[v], got))
		}
	}
}

// TestMigrateOwnTable: the job backend's migrations are recorded in their
// own table, so they leave the app's schema_migrations alone.
func TestMigrateOwnTable(t *testing.T) {
	dsn := newMigratedDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int64
	var dirty bool
	if err := conn.QueryRow(ctx, "SELECT version, dirty FROM "+MigrationsTable).Scan(&version, &dirty); err != nil {
		t.Fatal(err)
	}
	files, err := Files.List()
	if err != nil {
		t.Fatal(err)
	}
	if newest := int64(files[len(files)-1].Version); version != newest || dirty {
		t.Fatalf("%s: version %d, dirty %v; want %d, clean", MigrationsTable, version, dirty, newest)
	}
	var app *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('schema_migrations')::text").Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != nil {
		t.Fatal("pgjobs.Migrate created the app's schema_migrations")
	}
	if err := Migrate(ctx, "host=localhost dbname=x"); err == nil {
		t.Fatal("a key=value DSN must be refused with a clear error")
	}
}

// catalog describes, one fact a line in a stable order, every object of
// the job backend in the public schema of the database at dsn: relations
// (kind, persistence, storage options such as fill factors and autovacuum
// settings, grants, comments), columns (type, collation, nullability,
// default, identity, generated, storage, comments), constraints and
// indexes (their definitions), functions (pg_get_functiondef: signature,
// result, language, volatility, SET clauses and body; grants, comments),
// triggers, identity sequences, and the rows of cellgate_jobs_head, which
// the up migration seeds. The migrations table and its primary key are left
// out: they are golang-migrate's, and the legacy database the golden came
// from recorded its versions in the app's schema_migrations instead.
func catalog(tb testing.TB, dsn string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	const rels = `c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'cellgate\_jobs%'
		AND c.relname NOT IN ('` + MigrationsTable + `', '` + MigrationsTable + `_pkey')`
	queries := []string{
		`SELECT format('relation %s kind=%s persistence=%s options=%s acl=%s comment=%s',
		        c.relname, c.relkind, c.relpersistence, coalesce(c.reloptions::text, '-'),
		        coalesce(c.relacl::text, '-'), coalesce(obj_description(c.oid, 'pg_class'), '-'))
		 FROM pg_class c WHERE ` + rels,
		`SELECT format('column %s.%s #%s %s collation=%s notnull=%s default=%s identity=%s generated=%s storage=%s stattarget=%s comment=%s',
		        -- The column's place among the live columns, not attnum: a
		        -- column dropped by a down file and added again by its up
		        -- file comes back at the same place with another attnum.
		        c.relname, a.attname,
		        (SELECT count(*) FROM pg_attribute l WHERE l.attrelid = c.oid AND l.attnum > 0 AND NOT l.attisdropped AND l.attnum <= a.attnum),
		        format_type(a.atttypid, a.atttypmod),
		        coalesce((SELECT co.collname FROM pg_collation co WHERE co.oid = a.attcollation), '-'),
		        a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), a.attidentity, a.attgenerated,
		        a.attstorage, a.attstattarget, coalesce(col_description(c.oid, a.attnum), '-'))
		 FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		 LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
		 WHERE ` + rels + ` AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped`,
		`SELECT format('constraint %s.%s type=%s deferrable=%s %s comment=%s',
		        c.relname, k.conname, k.contype, k.condeferrable, pg_get_constraintdef(k.oid),
		        coalesce(obj_description(k.oid, 'pg_constraint'), '-'))
		 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE ` + rels,
		`SELECT format('index %s %s', i.indexrelid::regclass, pg_get_indexdef(i.indexrelid))
		 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE ` + rels,
		`SELECT format('trigger %s.%s %s', c.relname, t.tgname, pg_get_triggerdef(t.oid))
		 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE ` + rels + ` AND NOT t.tgisinternal`,
		`SELECT format('sequence %s type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
		        c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
		        s.seqcache, s.seqcycle,
		        coalesce((SELECT d.refobjid::regclass::text || '.' || a.attname FROM pg_depend d
		                  JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		                  WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')), '-'))
		 FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE ` + rels,
		`SELECT format('function %s acl=%s comment=%s' || chr(10) || '%s',
		        p.oid::regprocedure, coalesce(p.proacl::text, '-'),
		        coalesce(obj_description(p.oid, 'pg_proc'), '-'), pg_get_functiondef(p.oid))
		 FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'cellgate\_jobs%'`,
		`SELECT format('row cellgate_jobs_head %s', h::text) FROM cellgate_jobs_head h`,
	}
	var out []string
	for _, q := range queries {
		rows, err := conn.Query(ctx, q+" ORDER BY 1")
		if err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
		out = append(out, lines...)
	}
	return strings.Join(out, "\n") + "\n"
}

// lineDiff lists the lines only in want (-) and only in got (+); enough to
// see what changed in a catalog whose lines are unique.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
