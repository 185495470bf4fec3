package pgfollow

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/testpg"
)

// TestRunFollowsNotifiesTicksAndReconnects: Start runs once per
// connection, a NOTIFY reaches Notified, a quiet period reaches Tick, and
// a connection killed under it is replaced (Stopped hears why, Start runs
// again), until ctx ends.
func TestRunFollowsNotifiesTicksAndReconnects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, testpg.CreateDB(t, "pgfollow"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var starts, notified, ticks, stopped atomic.Int64
	var listener atomic.Uint32
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, pool, Options{
			Channel: "pgfollow_test",
			Period:  func() time.Duration { return 50 * time.Millisecond },
			Retry:   10 * time.Millisecond,
			Stopped: func(error) { stopped.Add(1) },
		}, Hooks{
			Start: func(_ context.Context, c *pgx.Conn) error {
				listener.Store(c.PgConn().PID())
				starts.Add(1)
				return nil
			},
			Notified: func(context.Context) error { notified.Add(1); return nil },
			Tick:     func(context.Context, *pgx.Conn) error { ticks.Add(1); return nil },
		})
	}()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: starts %d, notified %d, ticks %d, stopped %d", what, starts.Load(), notified.Load(), ticks.Load(), stopped.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	eventually("started", func() bool { return starts.Load() == 1 })
	eventually("a tick without notifications", func() bool { return ticks.Load() > 0 })
	if _, err := pool.Exec(ctx, "NOTIFY pgfollow_test"); err != nil {
		t.Fatal(err)
	}
	eventually("notified", func() bool { return notified.Load() == 1 })
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(listener.Load())); err != nil {
		t.Fatal(err)
	}
	eventually("reconnected", func() bool { return stopped.Load() >= 1 && starts.Load() >= 2 })
	if _, err := pool.Exec(ctx, "NOTIFY pgfollow_test"); err != nil {
		t.Fatal(err)
	}
	eventually("notified on the new connection", func() bool { return notified.Load() == 2 })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v; want context.Canceled", err)
	}
}
