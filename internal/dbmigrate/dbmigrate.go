// Package dbmigrate applies golang-migrate files embedded in the binary to
// a PostgreSQL database, each set of files under a migrations table of its
// own. The app's migrations (sql/migrations, table schema_migrations) and
// the PostgreSQL job backend's (internal/jobs/pgjobs, table
// cellgate_jobs_schema_migrations) share one database but not one version
// sequence: each owner numbers, applies and rolls back its own files.
//
// A Files value names one owner's files; its methods apply them (Up,
// Steps), repair a database (Force) and report where it stands (Status). A
// file that fails in the database comes back as an *Error naming the file,
// the version the database is now dirty at and PostgreSQL's error, so
// callers can tell "stop and repair" from "the database is unreachable,
// retry" (IsFailed).
//
// It is a leaf package: it knows nothing of the rest of cellgate, so any
// package that owns a schema can use it.
//
// Concurrency: Files is an immutable value; its methods keep no state and
// are safe for concurrent use.
// golang-migrate holds a PostgreSQL advisory lock while it migrates; the
// lock is derived from the database and the migrations table, so concurrent
// runs of one set of files on one database (several processes of a cell
// booting at once) take turns, while different sets (the app's and the
// jobs') may run side by side, which is safe because they touch disjoint
// objects.
package dbmigrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
)

// Files is one owner's migrations: the golang-migrate files in directory
// Dir of FS, their applied version recorded in table Table of each
// database.
type Files struct {
	// FS holds the files (usually an embed.FS).
	FS fs.FS
	// Dir is the directory inside FS that holds them.
	Dir string
	// Table is the migrations table golang-migrate records the version in.
	Table string
}

// Up applies the files to the database at dsn up to the newest version. A
// database already at the newest version is not an error. A file that
// PostgreSQL rejects, or a database left dirty by an earlier failure, is
// an *Error naming the file and PostgreSQL's error; any other error (the
// database cannot be reached, the lock cannot be taken) is not, and is
// worth retrying. When ctx ends, golang-migrate stops between files (a
// file in progress is never cut short) and Up returns what golang-migrate
// reports, which may be nil with files left unapplied: a caller whose ctx
// has ended must not take nil as "up to date".
func (f Files) Up(ctx context.Context, dsn string) error {
	return f.run(ctx, dsn, (*migrate.Migrate).Up)
}

// Down rolls back every applied file.
func (f Files) Down(ctx context.Context, dsn string) error {
	return f.run(ctx, dsn, (*migrate.Migrate).Down)
}

// Steps applies n files (n > 0) or rolls back -n (n < 0) from the current
// version. Errors are as for Up.
func (f Files) Steps(ctx context.Context, dsn string, n int) error {
	if n == 0 {
		return errors.New("migrate: steps must not be 0")
	}
	return f.run(ctx, dsn, func(m *migrate.Migrate) error { return m.Steps(n) })
}

// Force records version (-1 for "none applied") as the database's version
// and clears the dirty flag, running no file: the repair after a failed
// file, once the operator has checked what of it was applied. A version
// that has no file is refused, so a typo cannot skip migrations.
func (f Files) Force(ctx context.Context, dsn string, version int) error {
	if version < -1 {
		return fmt.Errorf("migrate: force: version must be >= -1, got %d", version)
	}
	if version >= 0 {
		list, err := f.List()
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(list, func(f File) bool { return f.Version == uint(version) }) {
			return fmt.Errorf("migrate: force: no migration has version %d in %s (versions: %s)", version, f.Dir, versions(list))
		}
	}
	return f.run(ctx, dsn, func(m *migrate.Migrate) error { return m.Force(version) })
}

// File is one version's pair of files.
type File struct {
	// Version is the file's number.
	Version uint
	// Up and Down are the file names ("000002_add_x.up.sql"); Down is
	// empty when there is none.
	Up, Down string
}

// List returns the files by version.
func (f Files) List() ([]File, error) {
	entries, err := fs.ReadDir(f.FS, f.Dir)
	if err != nil {
		return nil, fmt.Errorf("migrations %s: %w", f.Dir, err)
	}
	byVersion := map[uint]*File{}
	var out []File
	for _, e := range entries {
		m, err := source.Parse(e.Name())
		if err != nil || e.IsDir() {
			continue
		}
		mf := byVersion[m.Version]
		if mf == nil {
			mf = &File{Version: m.Version}
			byVersion[m.Version] = mf
		}
		switch m.Direction {
		case source.Up:
			mf.Up = e.Name()
		case source.Down:
			mf.Down = e.Name()
		}
	}
	for _, mf := range byVersion {
		out = append(out, *mf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

func versions(list []File) string {
	var b strings.Builder
	for i, f := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, f.Version)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// State is where one database stands with one set of files.
type State struct {
	// Applied is false when no file was ever applied (or all were rolled
	// back); Version is then 0.
	Applied bool
	// Version is the database's recorded version.
	Version uint
	// Dirty means the file of Version failed (or was cut short): the
	// database needs a repair and Force before any file runs again.
	Dirty bool
	// File is the up file of Version ("" when none is applied or the
	// version has no file here).
	File string
	// Latest is the newest version among the files (0 when there are
	// none).
	Latest uint
	// Pending lists the up files newer than Version, oldest first.
	Pending []string
	// Previous is the version before Version among the files, -1 when
	// there is none: the version to Force after Version's file failed.
	Previous int
}

// Status reads the database's version of these files. It changes nothing.
func (f Files) Status(ctx context.Context, dsn string) (State, error) {
	list, err := f.List()
	if err != nil {
		return State{}, err
	}
	var st State
	err = f.open(ctx, dsn, func(m *migrate.Migrate) error {
		v, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		if err != nil {
			return err
		}
		st.Applied, st.Version, st.Dirty = true, v, dirty
		return nil
	})
	if err != nil {
		return State{}, err
	}
	st.describe(list)
	return st, nil
}

// describe fills the fields that come from the files.
func (st *State) describe(list []File) {
	st.Previous = -1
	for _, mf := range list {
		st.Latest = max(st.Latest, mf.Version)
		switch {
		case st.Applied && mf.Version == st.Version:
			st.File = mf.Up
		case st.Applied && mf.Version < st.Version:
			st.Previous = int(mf.Version)
		case !st.Applied || mf.Version > st.Version:
			st.Pending = append(st.Pending, mf.Up)
		}
	}
}

// Error is a migration that failed in the database: a file PostgreSQL
// rejected, or a database already dirty from an earlier failure. Retrying
// cannot help: the file must be fixed and the version forced (Force).
type Error struct {
	// Table is the migrations table of the files.
	Table string
	// Version is the version the database is now dirty at; File its up
	// file ("" if the files have no such version).
	Version uint
	File    string
	// Previous is the version to Force once the file is fixed and what it
	// applied is undone: the version before Version, -1 for none.
	Previous int
	// AlreadyDirty means the database was dirty before this run: an
	// earlier run's file failed, and Err says only that.
	AlreadyDirty bool
	// Line is the line of the file PostgreSQL pointed at (0 if unknown).
	Line uint
	// Err is PostgreSQL's error (a *pgconn.PgError when it came from the
	// server) or golang-migrate's.
	Err error
}

func (e *Error) Error() string {
	file := cmp.Or(e.File, fmt.Sprintf("version %d", e.Version))
	if e.AlreadyDirty {
		return fmt.Sprintf("the database is dirty at version %d: %s failed in an earlier run and no file runs until the version is forced", e.Version, file)
	}
	at := ""
	if e.Line > 0 {
		at = fmt.Sprintf(" (line %d)", e.Line)
	}
	return fmt.Sprintf("migration %s failed%s: %v; the database is dirty at version %d", file, at, e.Err, e.Version)
}

func (e *Error) Unwrap() error { return e.Err }

// open opens a golang-migrate instance on dsn and runs step on it,
// stopping it gracefully (between files, never inside one) when ctx ends.
func (f Files) open(ctx context.Context, dsn string, step func(*migrate.Migrate) error) error {
	s, err := iofs.New(f.FS, f.Dir)
	if err != nil {
		return fmt.Errorf("migrations %s: %w", f.Dir, err)
	}
	u, err := URL(dsn, f.Table)
	if err != nil {
		s.Close()
		return err
	}
	m, err := migrate.NewWithSourceInstance("iofs", s, u)
	if err != nil {
		s.Close()
		return fmt.Errorf("migrate %s (%s): %w", Redact(dsn), f.Table, err)
	}
	defer m.Close()
	done := make(chan error, 1)
	go func() { done <- step(m) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		m.GracefulStop <- true
		err = <-done
	}
	return err
}

// run runs a step that applies files, turning a failure inside the
// database into an *Error.
func (f Files) run(ctx context.Context, dsn string, step func(*migrate.Migrate) error) error {
	var fail *Error
	err := f.open(ctx, dsn, func(m *migrate.Migrate) error {
		err := step(m)
		if err == nil || errors.Is(err, migrate.ErrNoChange) {
			return nil
		}
		var dirty migrate.ErrDirty
		var dbErr database.Error
		switch {
		case errors.As(err, &dirty):
			fail = &Error{Table: f.Table, Version: uint(dirty.Version), AlreadyDirty: true, Err: err}
		case errors.As(err, &dbErr):
			fail = &Error{Table: f.Table, Err: dbErr.OrigErr}
			// golang-migrate computes a line from PostgreSQL's position,
			// which many errors (a missing relation in ALTER TABLE) lack.
			if pe := (*pgconn.PgError)(nil); errors.As(dbErr.OrigErr, &pe) && pe.Position > 0 {
				fail.Line = dbErr.Line
			}
			if fail.Err == nil {
				fail.Err = errors.New(dbErr.Err)
			}
			// golang-migrate marks the version dirty before it runs a
			// file, so the recorded version names the file that failed.
			if v, d, verr := m.Version(); verr == nil && d {
				fail.Version = v
			}
		default:
			return err
		}
		return fail
	})
	if fail != nil {
		if list, lerr := f.List(); lerr == nil {
			st := State{Applied: true, Version: fail.Version}
			st.describe(list)
			fail.File, fail.Previous = st.File, st.Previous
		}
		return fail
	}
	if err != nil {
		return fmt.Errorf("migrate %s (%s): %w", Redact(dsn), f.Table, err)
	}
	return nil
}

// IsFailed reports whether err is a migration that failed in the database
// (an *Error), as opposed to one that could not run (the database is
// unreachable), which is worth retrying.
func IsFailed(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// URL rewrites a postgres:// (or postgresql://) DSN to the pgx5:// URL
// golang-migrate's pgx/v5 driver takes, with x-migrations-table set to
// table (the driver removes x- parameters before it connects). Key=value
// DSNs are refused: they cannot carry the table, and a clear error beats a
// driver's parse failure.
func URL(dsn, table string) (string, error) {
	if table == "" {
		return "", errors.New("migrate: empty migrations table name")
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("migrate: DSN must be a postgres:// URL, got %q", Redact(dsn))
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", table)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Redact drops a DSN's password before it reaches a log or an error. A DSN
// that does not parse as a URL keeps only what follows its last '@' (the
// host part), since whatever precedes it may be a password.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		if i := strings.Index(dsn, "@"); i >= 0 {
			return "…" + dsn[i:]
		}
		return "(unparseable DSN)"
	}
	return u.Redacted()
}
