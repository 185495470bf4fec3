package shards

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Tx is a transaction on one database of the cell: a shard, or the control
// database. It is a pgx.Tx (so sqlc's db.New(tx) takes it) that also knows
// which database it runs on, so a job enqueued in it (jobs EnqueueTx) is
// written to that database's jobs table, atomically with the caller's rows,
// without the transaction travelling in a context value.
//
// A Tx is a small value; copies share the one underlying transaction, which,
// like any pgx.Tx, is not safe for concurrent use.
type Tx struct {
	pgx.Tx
	shard *Shard // nil: the control database
}

// WrapTx labels a transaction the caller began itself: tx must run on
// shard's pool, or on the control database's when shard is nil.
func WrapTx(tx pgx.Tx, shard *Shard) Tx { return Tx{Tx: tx, shard: shard} }

// Shard is the shard the transaction runs on, nil for the control database.
func (t Tx) Shard() *Shard { return t.shard }

// Database names the transaction's database: the shard's name, or "control".
func (t Tx) Database() string {
	if t.shard == nil {
		return ControlName
	}
	return t.shard.Name
}

// ControlName is how the control database is named in errors, metrics and
// job listings, beside the shards' spec names.
const ControlName = "control"

// Tx runs fn in a transaction on the shard, committing when fn returns nil
// and rolling back otherwise (or on a panic). It takes no tenant permit:
// request handlers use Accessor.Tx.
func (sh *Shard) Tx(ctx context.Context, fn func(Tx) error) error {
	return pgx.BeginFunc(ctx, sh.Pool, func(tx pgx.Tx) error { return fn(Tx{Tx: tx, shard: sh}) })
}
