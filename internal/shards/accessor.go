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
	"github.com/cellgate/cellgate/internal/tenant"
)

// Permits are one request's per-tenant database permits
// (tenancy.max_db_connections). The runtime's bulkhead implements it; the
// shards know only this method, so the pools link no HTTP code.
type Permits interface {
	// Acquire takes one permit for the request's tenant, or returns the
	// refusal at once. A zero Permit (nothing held) is fine: its Release is
	// a no-op.
	Acquire() (admission.Permit, error)
}

// PermitsFunc finds the permits bound to a request's context, nil for none.
type PermitsFunc func(ctx context.Context) Permits

// UsePermits makes every Accessor take database permits from the ones f
// finds in the request's context. Call it once while wiring the server,
// before the first request; without it checkouts are not counted.
func (s *Set) UsePermits(f PermitsFunc) { s.permits = f }

// Accessor is a request's way to its tenant's shard. Every checkout (Conn,
// Tx) takes a per-tenant database permit first when the runtime has bound
// tenancy.max_db_connections to the request, and fails at once with the
// runtime's refusal (503, Retry-After: 1) when the tenant is at its cap; the
// permit goes back with the connection.
//
// The accessor is bound to the request it was made from: checkouts are
// counted while that request is in flight (the handler, its streaming body,
// and any goroutine using the accessor meanwhile). Once the handler has
// returned, checkouts still work but take no permit, so a goroutine that
// outlives the request is never counted, and never refused. Connections
// taken from Shard().Pool directly are not counted either.
//
// An Accessor is a small value, safe to copy and to use from several
// goroutines.
type Accessor struct {
	shard   *Shard
	slot    int
	tenant  string
	permits Permits // nil: not counted
}

// Accessor returns the accessor for ctx's tenant (tenant.From) with the
// database permits bound to ctx's request, if any. It fails with
// ErrNoTenant when ctx carries no tenant.
func (s *Set) Accessor(ctx context.Context) (Accessor, error) {
	t, ok := tenant.From(ctx)
	if !ok {
		return Accessor{}, ErrNoTenant
	}
	sh, slot, err := s.ForTenant(t)
	if err != nil {
		return Accessor{}, err
	}
	a := Accessor{shard: sh, slot: slot, tenant: t}
	if s.permits != nil {
		a.permits = s.permits(ctx)
	}
	return a, nil
}

// Shard returns the tenant's shard.
func (a Accessor) Shard() *Shard { return a.shard }

// Slot returns the tenant's slot.
func (a Accessor) Slot() int { return a.slot }

// Tenant returns the tenant id.
func (a Accessor) Tenant() string { return a.tenant }

// Conn checks out one connection of the tenant's shard for fn and gives it
// back when fn returns or panics. *pgxpool.Conn satisfies sqlc's DBTX, so
// fn can call db.New(conn). It returns fn's error, the pool's, or the
// permit refusal (before touching the pool).
func (a Accessor) Conn(ctx context.Context, fn func(*pgxpool.Conn) error) error {
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
func (a Accessor) Tx(ctx context.Context, fn func(Tx) error) error {
	return a.Conn(ctx, func(c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return fn(Tx{Tx: tx, shard: a.shard}) })
	})
}
