package shards

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"

	cgsql "github.com/cellgate/cellgate/sql"
)

// Migrate applies the embedded sql/migrations to the database at dsn (a
// postgres:// URL) up to the newest version. golang-migrate holds an
// advisory lock meanwhile, so concurrent boots of one cell are safe.
func Migrate(ctx context.Context, dsn string) error {
	src, err := iofs.New(cgsql.Migrations, cgsql.MigrationsDir)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	u, err := migrateURL(dsn)
	if err != nil {
		return err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", redact(dsn), err)
	}
	defer m.Close()
	done := make(chan error, 1)
	go func() { done <- m.Up() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		m.GracefulStop <- true
		err = <-done
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s: %w", redact(dsn), err)
	}
	return nil
}

// migrateURL rewrites a postgres:// URL to golang-migrate's pgx5:// scheme.
func migrateURL(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("migrate: DSN must be a postgres:// URL, got %q", redact(dsn))
	}
	u.Scheme = "pgx5"
	return u.String(), nil
}

// redact drops a DSN's password before it reaches a log or an error.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		if i := strings.Index(dsn, "@"); i >= 0 {
			return "…" + dsn[i:]
		}
		return "(unparseable DSN)"
	}
	return u.Redacted()
}
