package sql

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/testpg"
)

// TestMigrate applies the app's migrations twice (the second run is a
// no-op) under schema_migrations, and refuses a DSN golang-migrate cannot
// take.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.CreateDB(t, "appmigr")
	for i := range 2 {
		if err := Migrate(ctx, dsn); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil {
		t.Fatalf("accounts table missing after migrate: %v", err)
	}
	var version int
	var dirty bool
	if err := conn.QueryRow(ctx, "SELECT version, dirty FROM "+MigrationsTable).Scan(&version, &dirty); err != nil || dirty || version < 1 {
		t.Fatalf("%s: version %d dirty %v (%v)", MigrationsTable, version, dirty, err)
	}
	var jobs bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('cellgate_jobs') IS NOT NULL").Scan(&jobs); err != nil || jobs {
		t.Fatalf("the app's migrations created the job runtime's table (%v)", err)
	}
	if err := Migrate(ctx, "host=localhost dbname=x"); err == nil {
		t.Fatal("a key=value DSN must be refused with a clear error")
	}
}
