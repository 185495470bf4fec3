package plans

import (
	"context"
	"embed"

	"github.com/cellgate/cellgate/internal/dbmigrate"
)

// migrations hold the tenant table's own golang-migrate files: the table
// belongs to this package, applied to the control database under its own
// version table, like the job runtime's schema.
//
//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable records the tenant table's schema version in the control
// database.
const MigrationsTable = "cellgate_tenants_schema_migrations"

// Files are the tenant table's migrations as dbmigrate applies, forces and
// reports them (the `server migrate` subcommand).
var Files = dbmigrate.Files{FS: migrations, Dir: "migrations", Table: MigrationsTable}

// Migrate applies the tenant table's migrations to the database at dsn.
func Migrate(ctx context.Context, dsn string) error { return Files.Up(ctx, dsn) }

// Channel is the NOTIFY channel every write of the tenant table signals.
const Channel = "cellgate_tenants"
