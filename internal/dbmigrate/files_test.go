package dbmigrate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/testpg"
)

func files(second string) Files {
	return Files{Table: "t_migrations", Dir: "m", FS: fstest.MapFS{
		"m/000001_a.up.sql":       {Data: []byte("CREATE TABLE a (id int);")},
		"m/000001_a.down.sql":     {Data: []byte("DROP TABLE a;")},
		"m/000002_add_x.up.sql":   {Data: []byte(second)},
		"m/000002_add_x.down.sql": {Data: []byte("ALTER TABLE a DROP COLUMN x;")},
		"m/README.md":             {Data: []byte("not a migration")},
		"m/000003_later.up.sql":   {Data: []byte("CREATE TABLE c (id int);")},
		"m/000003_later.down.sql": {Data: []byte("DROP TABLE c;")},
	}}
}

func TestList(t *testing.T) {
	list, err := files("").List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[1] != (File{Version: 2, Up: "000002_add_x.up.sql", Down: "000002_add_x.down.sql"}) {
		t.Fatalf("List = %+v", list)
	}
}

func TestStateDescribe(t *testing.T) {
	list, _ := files("").List()
	st := State{}
	st.describe(list)
	if st.Latest != 3 || len(st.Pending) != 3 || st.Previous != -1 || st.File != "" {
		t.Fatalf("nothing applied: %+v", st)
	}
	st = State{Applied: true, Version: 2, Dirty: true}
	st.describe(list)
	if st.File != "000002_add_x.up.sql" || st.Previous != 1 || strings.Join(st.Pending, ",") != "000003_later.up.sql" {
		t.Fatalf("at 2: %+v", st)
	}
}

// TestFailedFileAndRepair: a file PostgreSQL rejects is an *Error naming
// the file, the line and PostgreSQL's error; the database is dirty at its
// version, every later Up says so without retrying the file, Force of the
// previous version and a fixed file recover.
func TestFailedFileAndRepair(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.CreateDB(t, "dbmigr")
	bad := files("ALTER TABLE a ADD COLUMN x int;\nALTER TABLE nope ADD COLUMN y int;")
	err := bad.Up(ctx, dsn)
	var e *Error
	if !errors.As(err, &e) || !IsFailed(err) {
		t.Fatalf("Up = %v, want an *Error", err)
	}
	var pe *pgconn.PgError
	if e.File != "000002_add_x.up.sql" || e.Version != 2 || e.Previous != 1 || e.AlreadyDirty || !errors.As(err, &pe) || pe.Code != "42P01" || e.Line != 0 {
		t.Fatalf("error = %+v (%v)", e, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "000002_add_x.up.sql") || !strings.Contains(msg, `relation "nope" does not exist`) || strings.Contains(msg, "ALTER TABLE a") {
		t.Fatalf("message %q must name the file and PostgreSQL's error, not dump the SQL", msg)
	}
	st, err := bad.Status(ctx, dsn)
	if err != nil || !st.Dirty || st.Version != 2 || st.File != "000002_add_x.up.sql" || st.Previous != 1 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	err = bad.Up(ctx, dsn)
	if !errors.As(err, &e) || !e.AlreadyDirty || e.File != "000002_add_x.up.sql" || !strings.Contains(err.Error(), "dirty at version 2") {
		t.Fatalf("second Up = %v, want an already-dirty *Error", err)
	}
	if err := bad.Force(ctx, dsn, 7); err == nil || !strings.Contains(err.Error(), "no migration has version 7") {
		t.Fatalf("Force 7 = %v, want a refusal", err)
	}
	if err := bad.Force(ctx, dsn, 1); err != nil {
		t.Fatal(err)
	}
	// A syntax error carries a position: the line is named.
	syntax := Files{Table: "t2", Dir: "m", FS: fstest.MapFS{"m/000001_s.up.sql": {Data: []byte("CREATE TABLE s (id int);\nCREATE TABLEE s2 (id int);")}}}
	if err := syntax.Up(ctx, dsn); !errors.As(err, &e) || e.Line != 2 || !strings.Contains(err.Error(), "(line 2)") {
		t.Fatalf("syntax error = %v, want line 2", err)
	}
	// The file ran in one implicit transaction: nothing of it stayed, so
	// the fixed file applies cleanly.
	good := files("ALTER TABLE a ADD COLUMN x int;")
	if err := good.Up(ctx, dsn); err != nil {
		t.Fatalf("Up after force and fix: %v", err)
	}
	st, err = good.Status(ctx, dsn)
	if err != nil || st.Dirty || st.Version != 3 || len(st.Pending) != 0 {
		t.Fatalf("Status after repair = %+v, %v", st, err)
	}
	if err := good.Steps(ctx, dsn, -2); err != nil {
		t.Fatal(err)
	}
	if st, _ = good.Status(ctx, dsn); st.Version != 1 || len(st.Pending) != 2 {
		t.Fatalf("after down 2: %+v", st)
	}
}

// TestUnreachableIsNotFailed: a database that cannot be reached is worth
// retrying, so it is not an *Error.
func TestUnreachableIsNotFailed(t *testing.T) {
	err := files("").Up(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err == nil || IsFailed(err) {
		t.Fatalf("Up on a closed port = %v, want a plain error", err)
	}
}
