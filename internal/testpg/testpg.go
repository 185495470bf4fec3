// Package testpg gives tests their own PostgreSQL databases on the server
// named by $CELLGATE_TEST_PG (default postgres://postgres@127.0.0.1:5432/
// postgres?sslmode=disable). Each database has a unique name and is dropped
// when the test ends. If the server is down the test fails — it never
// skips, so CI cannot go green without the database tests having run.
//
// Safe for concurrent use by parallel tests.
package testpg

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultServer is used when $CELLGATE_TEST_PG is unset.
const DefaultServer = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var seq atomic.Int64

// Server returns the admin URL of the test server.
func Server() string {
	if s := os.Getenv("CELLGATE_TEST_PG"); s != "" {
		return s
	}
	return DefaultServer
}

// CreateDB creates a fresh database and returns its URL; it is dropped (with
// its connections terminated) in t.Cleanup.
func CreateDB(t testing.TB, prefix string) string {
	t.Helper()
	return createDB(t, Server(), prefix)
}

func createDB(t testing.TB, admin, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("testpg: PostgreSQL is not reachable at %s (set CELLGATE_TEST_PG or start it: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", admin, err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("cgt_%s_%d_%d_%d", sanitize(prefix), os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testpg: create database %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, admin, name) })
	u, err := dbURL(admin, name)
	if err != nil {
		t.Fatalf("testpg: %v", err)
	}
	return u
}

func drop(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("testpg: drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("testpg: drop %s: %v", name, err)
	}
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
		if b.Len() >= 16 {
			break
		}
	}
	return b.String()
}
