// Package pgfollow keeps a process's copy of a control-database record
// current: it LISTENs on a channel on a connection of its own, reacts to
// every notification, checks again at a steady period in case one was
// missed, and reconnects after an outage while the caller keeps what it
// last loaded. The tenant table (internal/plans) and the shard map
// (internal/shardmap) both follow their record this way.
package pgfollow

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultResync is how often a follower checks its record besides
// following notifications: a notification lost with a broken connection
// is caught within it.
const DefaultResync = time.Second

// DefaultRetry is the pause before reconnecting after a connection ended.
const DefaultRetry = 500 * time.Millisecond

// Defaults returns a follower's owner's settings with the zero (or
// negative) ones replaced by DefaultResync, DefaultRetry and
// slog.Default(): every owner documents the same defaults.
func Defaults(resync, retry time.Duration, log *slog.Logger) (time.Duration, time.Duration, *slog.Logger) {
	if resync <= 0 {
		resync = DefaultResync
	}
	if retry <= 0 {
		retry = DefaultRetry
	}
	if log == nil {
		log = slog.Default()
	}
	return resync, retry, log
}

// Hooks are what a follower does at each point of a connection's life.
// Each returning an error ends that connection; Run reconnects.
type Hooks struct {
	// Start runs on the listening connection right after LISTEN: the
	// first load goes over the connection that just answered, since
	// after an outage the pool may still hold connections that died.
	Start func(ctx context.Context, c *pgx.Conn) error
	// Notified runs after a notification. It should read through the
	// pool: a query on the listening connection can stall behind its last
	// timed-out wait.
	Notified func(ctx context.Context) error
	// Tick runs on the listening connection after a Period without a
	// notification.
	Tick func(ctx context.Context, c *pgx.Conn) error
}

// Options set the periods of Run.
type Options struct {
	// Channel is the NOTIFY channel to LISTEN on.
	Channel string
	// Period is how long a connection waits for a notification before
	// Hooks.Tick; a function, so a follower can change it while it runs.
	Period func() time.Duration
	// Retry is the pause before reconnecting after a connection ended.
	Retry time.Duration
	// Stopped hears why a connection ended, before the pause.
	Stopped func(err error)
}

// Run follows until ctx ends and returns ctx's error.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options, h Hooks) error {
	for {
		err := follow(ctx, pool, o, h)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o.Stopped(err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.Retry):
		}
	}
}

// follow is one connection's life: listen, start, then wait for
// notifications or the period.
func follow(ctx context.Context, pool *pgxpool.Pool, o Options, h Hooks) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A listening connection must not return to the pool.
	defer func() { _ = conn.Hijack().Close(context.Background()) }()
	c := conn.Conn()
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{o.Channel}.Sanitize()); err != nil {
		return err
	}
	if err := h.Start(ctx, c); err != nil {
		return err
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, o.Period())
		_, err := c.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			err = h.Notified(ctx)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !c.IsClosed():
			err = h.Tick(ctx, c)
		}
		if err != nil {
			return err
		}
	}
}
