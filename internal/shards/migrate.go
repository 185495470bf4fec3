package shards

import (
	"context"

	"github.com/cellgate/cellgate/internal/dbmigrate"
	cgsql "github.com/cellgate/cellgate/sql"
)

// appMigrationsTable is where golang-migrate records the version of the
// app's own migrations (sql/migrations): its default name, so databases
// migrated before the job backend got a table of its own keep their record.
const appMigrationsTable = "schema_migrations"

// Migrate applies the app's embedded sql/migrations to the database at dsn
// (a postgres:// URL) up to the newest version, under appMigrationsTable.
// The job backend's tables are not among them: pgjobs.Migrate applies
// those. golang-migrate holds an advisory lock meanwhile, so concurrent
// boots of one cell are safe.
func Migrate(ctx context.Context, dsn string) error {
	return dbmigrate.Up(ctx, dsn, cgsql.Migrations, cgsql.MigrationsDir, appMigrationsTable)
}
