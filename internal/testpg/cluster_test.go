package testpg

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartCluster: a private cluster runs with wal_level = logical on its
// own port and hands out databases; after the test that started it, the
// server is down and its directory gone.
func TestStartCluster(t *testing.T) {
	ctx := context.Background()
	var c *Cluster
	t.Run("cluster", func(t *testing.T) {
		c = StartCluster(t, ClusterOptions{})
		if c.Port == 5432 {
			t.Fatalf("private cluster on the shared port")
		}
		conn, err := pgx.Connect(ctx, c.CreateDB(t, "cluster"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var level string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
			t.Fatal(err)
		}
		if level != "logical" {
			t.Errorf("wal_level = %s; want logical", level)
		}
	})
	if c == nil {
		t.Fatal("no cluster")
	}
	if conn, err := pgx.Connect(ctx, c.URL); err == nil {
		conn.Close(ctx)
		t.Error("cluster still answers after cleanup")
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s left: %v", c.Dir, err)
	}
}
