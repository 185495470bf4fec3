// Package sql embeds the service's migrations (golang-migrate files) and
// holds the sqlc queries the generator compiles into gen/db.
//
// The migration files are plain golang-migrate files: the same directory
// works with the golang-migrate CLI. Read-only after init; safe for
// concurrent use.
package sql

import "embed"

// Migrations holds sql/migrations/*.sql, the app's own migrations, applied
// to the control database and to every shard under golang-migrate's
// schema_migrations table. The job backend's tables are not here:
// internal/jobs/pgjobs embeds and applies its own.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// MigrationsDir is the directory inside Migrations that holds the files.
const MigrationsDir = "migrations"
