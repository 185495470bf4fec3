package shards

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/admission"
)

// Permits are one request's per-tenant database permits
// (tenancy.max_db_connections). The runtime's bulkhead implements it and
// hands it to Set.Accessor once per request; the shards know only this
// method, so the pools link no HTTP code.
type Permits interface {
	// Acquire takes one permit for the request's tenant, or returns the
	// refusal at once. A zero Permit (nothing held) is fine: its Release is
	// a no-op.
	Acquire() (admission.Permit, error)
}

// Accessor is the way to one tenant's shard. Every checkout (Conn, Tx)
// first takes a permit from the Permits it was built with, if any, and
// fails at once with their refusal (the runtime answers 503, Retry-After:
// 1) when the tenant is at its cap; the permit goes back with the
// connection.
//
// The runtime builds one per tenant request with the request's permits:
// they count while the request is in flight (the handler, its streaming
// body, and any goroutine using the accessor meanwhile) and take nothing
// once the handler has returned, so a goroutine that outlives the request
// is never counted, and never refused. A worker's accessor has no permits.
// Connections taken from Shard().Pool directly are not counted either.
//
// An accessor for a tenant the set cannot serve (none, or one of another
// cell) holds that error: Err reports it and every checkout returns it.
//
// An Accessor is a small value, safe to copy and to use from several
// goroutines.
type Accessor struct {
	shard   *Shard
	slot    int
	tenant  string
	permits Permits // nil: not counted
	err     error
	// deferred, when set, holds the commit of Tx back (DeferCommit).
	deferred *DeferredCommit
}

// Accessor returns the accessor for tenant's shard whose checkouts take
// permits from p (nil: not counted). Its Err is ErrNoTenant for an empty or
// invalid tenant id, ErrOtherCell for a tenant of another cell and
// ErrNoDatabases when s is nil (a server built without databases).
func (s *Set) Accessor(tenant string, p Permits) Accessor {
	a := Accessor{tenant: tenant, permits: p}
	if s == nil {
		a.err = ErrNoDatabases
		return a
	}
	a.shard, a.slot, a.err = s.ForTenant(tenant)
	return a
}

// ErrNoDatabases is the Err of an accessor from a nil Set: the server was
// built without the cell's databases.
var ErrNoDatabases = errors.New("shards: this server has no databases")

// Permits returns the permits the accessor's checkouts take, nil when
// they are not counted.
func (a Accessor) Permits() Permits { return a.permits }

// Err reports why the accessor cannot reach a shard, nil when it can.
func (a Accessor) Err() error { return a.err }

// Shard returns the tenant's shard, nil when Err is not.
func (a Accessor) Shard() *Shard { return a.shard }

// Slot returns the tenant's slot.
func (a Accessor) Slot() int { return a.slot }

// Tenant returns the tenant id.
func (a Accessor) Tenant() string { return a.tenant }

// Conn checks out one connection of the tenant's shard for fn and gives it
// back when fn returns or panics. *pgxpool.Conn satisfies sqlc's DBTX, so
// fn can call db.New(conn). It returns fn's error, the pool's, Err, or the
// permit refusal (before touching the pool).
func (a Accessor) Conn(ctx context.Context, fn func(*pgxpool.Conn) error) error {
	if a.err != nil {
		return a.err
	}
	if a.permits != nil {
		p, err := a.permits.Acquire()
		if err != nil {
			return err
		}
		defer p.Release()
	}
	conn, err := a.shard.Pool.Acquire(ctx)
	if err != nil {
		return unavailable(a.shard, err)
	}
	defer conn.Release()
	if err := fn(conn); err != nil {
		return unavailable(a.shard, err)
	}
	return nil
}

// ErrShardUnavailable marks a checkout whose shard cannot be reached. The
// runtime answers it 503 with Retry-After, so a down shard fails only its
// own tenants, fast.
var ErrShardUnavailable = errors.New("the tenant's database shard is unavailable; retry shortly")

// shardError keeps the cause of an unreachable shard in the error chain
// beside ErrShardUnavailable.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string   { return "shard " + e.shard + " unavailable: " + e.err.Error() }
func (e *shardError) Unwrap() []error { return []error{ErrShardUnavailable, e.err} }

// unavailable marks connection-level failures (cannot connect, connection
// lost, server shutting down or refusing connections) as ErrShardUnavailable
// and returns every other error — a constraint violation, no rows — as is.
func unavailable(sh *Shard, err error) error {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
	case errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")):
	case pgconn.SafeToRetry(err):
	default:
		return err
	}
	return &shardError{shard: sh.Name, err: err}
}

// Tx runs fn in a transaction on one checked-out connection of the
// tenant's shard, committing when fn returns nil and rolling back
// otherwise (or on a panic). The permit is held for the whole transaction.
//
// On an accessor from DeferCommit, a Tx whose fn returns nil is not
// committed yet: see DeferredCommit.
func (a Accessor) Tx(ctx context.Context, fn func(Tx) error) error {
	if a.deferred != nil && a.err == nil {
		return a.deferred.run(ctx, a, fn)
	}
	return a.Conn(ctx, func(c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return fn(Tx{Tx: tx, shard: a.shard}) })
	})
}
