package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/testpg"
	cgsql "github.com/cellgate/cellgate/sql"
)

// TestCheckDatabases: check -databases passes on migrated shards of a
// server with wal_level = logical, and names the shard, the table and the
// fix when a tenant table's replica identity stops covering slot.
func TestCheckDatabases(t *testing.T) {
	pg := testpg.StartCluster(t, testpg.ClusterOptions{})
	ctx := context.Background()
	var last string
	for _, env := range []string{"CELLGATE_SHARD_0_DSN", "CELLGATE_SHARD_1_DSN"} {
		dsn := pg.CreateDB(t, strings.ToLower(env[9:16]))
		if err := cgsql.Migrate(ctx, dsn); err != nil {
			t.Fatal(err)
		}
		t.Setenv(env, dsn)
		last = dsn
	}
	out, _, err := runCLI(t, "check", "-databases")
	if err != nil || !strings.Contains(out, "databases ok") {
		t.Fatalf("check -databases on migrated shards: %q, %v", out, err)
	}
	c, err := pgx.Connect(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `ALTER TABLE orders REPLICA IDENTITY DEFAULT`); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, "check", "-databases")
	if err == nil || !strings.Contains(err.Error(), "table orders on source shard shard-1") || !strings.Contains(err.Error(), "REPLICA IDENTITY USING INDEX") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a shard whose orders lost their identity: %v", err)
	}
}
