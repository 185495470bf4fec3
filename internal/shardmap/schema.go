package shardmap

import (
	"context"
	"embed"

	"github.com/cellgate/cellgate/internal/dbmigrate"
)

// migrations hold the shard map's own golang-migrate files, applied to the
// control database under their own version table like the tenant table's.
//
//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable records the shard map's schema version in the control
// database.
const MigrationsTable = "cellgate_shardmap_schema_migrations"

// Files are the shard map's migrations as dbmigrate applies, forces and
// reports them (the `server migrate` subcommand, schema "shardmap").
var Files = dbmigrate.Files{FS: migrations, Dir: "migrations", Table: MigrationsTable}

// Migrate applies the shard map's migrations to the database at dsn.
func Migrate(ctx context.Context, dsn string) error { return Files.Up(ctx, dsn) }

// Channel is the NOTIFY channel every write of the shard map signals.
const Channel = "cellgate_shard_map"
