package pgjobs

import (
	"context"
	"embed"

	"github.com/cellgate/cellgate/internal/dbmigrate"
)

// migrations holds the job backend's own golang-migrate files: the jobs
// tables and functions belong to this package, not to the app's
// sql/migrations, so an app that uses the job backend gets them without
// copying SQL, and the app's version numbers stay its own.
//
//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable is the table in which golang-migrate records the version
// of the job backend's schema in each database. It is not the app's
// schema_migrations: both sets of files live in one database, each with its
// own version sequence.
const MigrationsTable = "cellgate_jobs_schema_migrations"

// Migrate applies the job backend's embedded migrations to the database at
// dsn (a postgres:// URL) up to the newest version, under MigrationsTable.
// A Backend from New calls it for each of its databases; call it yourself
// before NewPool or NewDB. Concurrent calls on one
// database take turns on golang-migrate's advisory lock.
func Migrate(ctx context.Context, dsn string) error {
	return Files.Up(ctx, dsn)
}

// Files are the job backend's migrations as dbmigrate applies, forces and
// reports them (the `server migrate` subcommand).
var Files = dbmigrate.Files{FS: migrations, Dir: "migrations", Table: MigrationsTable}
