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
// to the control database and to every shard.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// MigrationsDir is the directory inside Migrations that holds the files.
const MigrationsDir = "migrations"

// MigrationsTable is where golang-migrate records the version of the app's
// migrations: its default name, so the golang-migrate CLI finds it too.
const MigrationsTable = "schema_migrations"

// Migrate applies the app's migrations to the database at dsn (a
// postgres:// URL) up to the newest version.
func Migrate(ctx context.Context, dsn string) error {
	return dbmigrate.Up(ctx, dsn, Migrations, MigrationsDir, MigrationsTable)
}
