package shards

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/admission"
)

// DeferredCommit holds back the commit of a request's transaction until
// the request's answer is known, so that something computed after the
// handler returned (the runtime's idempotency record of the answer) can be
// written in the same transaction as the handler's rows: it then exists if
// and only if they were committed. Accessor.Tx commits when its fn
// returns, before the handler has even chosen its status; only its caller
// can close the transaction later, which is what this type is for.
//
// On an accessor from DeferCommit:
//   - the first Tx whose fn returns nil leaves its transaction open, with
//     its connection and database permit, until Commit or Rollback;
//   - a later Tx runs inside that transaction under a savepoint, so every
//     write of the request commits (or not) together; a failed later Tx
//     rolls back to its savepoint only;
//   - a Tx whose fn fails rolls back as usual (RolledBack reports it);
//   - Tx calls must not run concurrently or nest: the second is refused
//     with ErrDeferredBusy rather than deadlocking.
//
// Commit or Rollback must follow, exactly once the handler has returned.
// A DeferredCommit is safe for concurrent use; it is not reusable.
type DeferredCommit struct {
	mu         sync.Mutex
	running    bool
	closed     bool
	rolledBack bool
	tx         pgx.Tx
	conn       *pgxpool.Conn
	permit     admission.Permit
	shard      *Shard
}

// ErrDeferredBusy refuses a Tx that starts while another Tx of the same
// deferred-commit request is running (nested, or from another goroutine).
var ErrDeferredBusy = errors.New("shards: another Tx of this request is running; with a deferred commit, Tx calls must run one after another")

// ErrDeferredClosed refuses a Tx that starts after the request's deferred
// transaction was committed or rolled back (a goroutine that outlived the
// handler).
var ErrDeferredClosed = errors.New("shards: the request's transaction is already finished")

// DeferCommit returns a copy of a whose Tx leaves its transaction to d
// (see DeferredCommit). Conn is unchanged.
func (a Accessor) DeferCommit(d *DeferredCommit) Accessor {
	a.deferred = d
	return a
}

// run is Accessor.Tx on a deferred-commit accessor.
func (d *DeferredCommit) run(ctx context.Context, a Accessor, fn func(Tx) error) error {
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return ErrDeferredClosed
	case d.running:
		d.mu.Unlock()
		return ErrDeferredBusy
	}
	d.running = true
	open := d.tx
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running = false
		d.mu.Unlock()
	}()

	if open != nil {
		// A savepoint: pgx's nested Begin. Its failure rolls back to it
		// and leaves the outer transaction usable.
		return pgx.BeginFunc(ctx, open, func(sp pgx.Tx) error { return fn(Tx{Tx: sp, shard: d.shard}) })
	}

	var permit admission.Permit
	if a.permits != nil {
		p, err := a.permits.Acquire()
		if err != nil {
			d.noteRollback()
			return err
		}
		permit = p
	}
	conn, err := a.shard.Pool.Acquire(ctx)
	if err != nil {
		permit.Release()
		d.noteRollback()
		return unavailable(a.shard, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		permit.Release()
		d.noteRollback()
		return unavailable(a.shard, err)
	}
	parked := false
	defer func() {
		if !parked {
			// fn failed or panicked: as Accessor.Tx, roll back and give
			// the connection and the permit back.
			_ = tx.Rollback(context.WithoutCancel(ctx))
			conn.Release()
			permit.Release()
			d.noteRollback()
		}
	}()
	if err := fn(Tx{Tx: tx, shard: a.shard}); err != nil {
		return unavailable(a.shard, err)
	}
	d.mu.Lock()
	d.tx, d.conn, d.permit, d.shard = tx, conn, permit, a.shard
	d.mu.Unlock()
	parked = true
	return nil
}

func (d *DeferredCommit) noteRollback() {
	d.mu.Lock()
	d.rolledBack = true
	d.mu.Unlock()
}

// Pending reports whether a transaction waits for Commit or Rollback.
func (d *DeferredCommit) Pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tx != nil
}

// RolledBack reports whether a Tx of the request failed and rolled back
// its transaction (including a refused permit or an unreachable shard).
// With Pending false and RolledBack true, the request wrote nothing through
// its accessor's transactions.
func (d *DeferredCommit) RolledBack() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rolledBack
}

// Commit runs last (may be nil) in the pending transaction and commits it;
// when last fails, it rolls back and returns last's error. With no pending
// transaction it does nothing and returns nil. Either way, the connection
// and the permit go back and later Tx calls are refused.
func (d *DeferredCommit) Commit(ctx context.Context, last func(Tx) error) error {
	tx, release := d.close()
	if tx == nil {
		return nil
	}
	defer release()
	if last != nil {
		if err := last(Tx{Tx: tx, shard: d.shard}); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return unavailable(d.shard, err)
	}
	return nil
}

// Rollback rolls the pending transaction back, if any, and refuses later
// Tx calls.
func (d *DeferredCommit) Rollback(ctx context.Context) {
	tx, release := d.close()
	if tx == nil {
		return
	}
	defer release()
	_ = tx.Rollback(ctx)
}

// close takes the pending transaction out of d (nil if none) and returns
// the function that gives its connection and permit back.
func (d *DeferredCommit) close() (pgx.Tx, func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	tx, conn, permit := d.tx, d.conn, d.permit
	d.tx, d.conn = nil, nil
	if tx == nil {
		return nil, nil
	}
	return tx, func() {
		conn.Release()
		permit.Release()
	}
}
