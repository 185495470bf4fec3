// Package dbmigrate applies golang-migrate files embedded in the binary to
// a PostgreSQL database, each set of files under a migrations table of its
// own. The app's migrations (sql/migrations, table schema_migrations) and
// the PostgreSQL job backend's (internal/jobs/pgjobs, table
// cellgate_jobs_schema_migrations) share one database but not one version
// sequence: each owner numbers, applies and rolls back its own files.
//
// It is a leaf package: it knows nothing of the rest of cellgate, so any
// package that owns a schema can use it.
//
// Concurrency: the functions keep no state and are safe for concurrent use.
// golang-migrate holds a PostgreSQL advisory lock while it migrates; the
// lock is derived from the database and the migrations table, so concurrent
// runs of one set of files on one database (several processes of a cell
// booting at once) take turns, while different sets (the app's and the
// jobs') may run side by side, which is safe because they touch disjoint
// objects.
package dbmigrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Up applies the migrations in directory dir of src to the database at dsn
// (a postgres:// URL) up to the newest version, recording the version in
// table. A database already at the newest version is not an error. When
// ctx ends, golang-migrate stops between files (a file in progress is never
// cut short) and Up returns what golang-migrate reports, which may be nil
// with files left unapplied: a caller whose ctx has ended must not take nil
// as "up to date".
func Up(ctx context.Context, dsn string, src fs.FS, dir, table string) error {
	return run(ctx, dsn, src, dir, table, (*migrate.Migrate).Up)
}

// Down rolls back every migration in directory dir of src that the
// database at dsn has applied (per table). Tests use it to check that a
// down file removes what its up file created; the server never rolls back.
func Down(ctx context.Context, dsn string, src fs.FS, dir, table string) error {
	return run(ctx, dsn, src, dir, table, (*migrate.Migrate).Down)
}

// run opens a golang-migrate instance and runs step on it, stopping it
// gracefully (between files, never inside one) when ctx ends.
func run(ctx context.Context, dsn string, src fs.FS, dir, table string, step func(*migrate.Migrate) error) error {
	s, err := iofs.New(src, dir)
	if err != nil {
		return fmt.Errorf("migrations %s: %w", dir, err)
	}
	u, err := URL(dsn, table)
	if err != nil {
		s.Close()
		return err
	}
	m, err := migrate.NewWithSourceInstance("iofs", s, u)
	if err != nil {
		s.Close()
		return fmt.Errorf("migrate %s (%s): %w", Redact(dsn), table, err)
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
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s (%s): %w", Redact(dsn), table, err)
	}
	return nil
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
