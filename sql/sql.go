// Package sql holds the app's own schema: its migrations (golang-migrate
// files, embedded) and the sqlc queries the generator compiles into gen/db.
//
// The migration files are plain golang-migrate files: the same directory
// works with the golang-migrate CLI. The job backend's tables are not here:
// internal/jobs/pgjobs embeds and applies its own, under its own table.
//
// Concurrency: read-only after init; Migrate is safe to call from several
// processes at once (golang-migrate holds an advisory lock).
package sql

import (
	"context"
	"embed"

	"github.com/cellgate/cellgate/internal/dbmigrate"
)

// Migrations holds sql/migrations/*.sql, the app's own migrations, applied
// to the databases database.app_migrations names (the shards by default).
//
//go:embed migrations/*.sql
var Migrations embed.FS

// MigrationsDir is the directory inside Migrations that holds the files.
const MigrationsDir = "migrations"

// MigrationsTable is where golang-migrate records the version of the app's
// migrations: its default name, so the golang-migrate CLI finds it too.
const MigrationsTable = "schema_migrations"

// Files are the app's migrations as dbmigrate applies, rolls back, forces
// and reports them (the `server migrate` subcommand).
var Files = dbmigrate.Files{FS: Migrations, Dir: MigrationsDir, Table: MigrationsTable}

// Migrate applies the app's migrations to the database at dsn (a
// postgres:// URL) up to the newest version. A file PostgreSQL rejects is a
// *dbmigrate.Error naming it.
func Migrate(ctx context.Context, dsn string) error {
	return Files.Up(ctx, dsn)
}
