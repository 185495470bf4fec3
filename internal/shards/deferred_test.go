package shards

import (
	"context"
	"errors"
	"testing"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/testpg"
)

// TestDeferredCommit on a real database: a Tx on a deferred-commit
// accessor is not committed when fn returns (another connection does not
// see its row) and keeps its permit; a second Tx joins it under a
// savepoint (its failure undoes only itself); Commit writes last in the
// same transaction and commits everything, giving the permit back;
// Rollback undoes everything; a failed first Tx is reported by
// RolledBack; a Tx after the end, or during another, is refused.
func TestDeferredCommit(t *testing.T) {
	dsn := testpg.CreateDB(t, "deferred")
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN", MaxConns: 2},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "DSN", MaxConns: 4}},
	}
	ctx := context.Background()
	set, err := Open(ctx, db, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	pool := set.Shards()[0].Pool
	if _, err := pool.Exec(ctx, `CREATE TABLE t (v text)`); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eng, err := admission.New(admission.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	permits := &testPermits{eng: eng, tenant: "acme"}
	permits.live.Store(true)
	insert := func(v string) func(Tx) error {
		return func(tx Tx) error { _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, v); return err }
	}
	boom := errors.New("boom")

	var d DeferredCommit
	acc := set.Accessor("acme", permits).DeferCommit(&d)
	if err := acc.Tx(ctx, insert("a")); err != nil {
		t.Fatal(err)
	}
	if !d.Pending() || count() != 0 || eng.Report().InFlight != 1 {
		t.Fatalf("pending %v, %d rows visible, %d permits", d.Pending(), count(), eng.Report().InFlight)
	}
	if err := acc.Tx(ctx, func(tx Tx) error {
		if err := insert("b")(tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed savepoint: %v", err)
	}
	if err := acc.Tx(ctx, insert("c")); err != nil {
		t.Fatal(err)
	}
	var busy error
	if err := acc.Tx(ctx, func(tx Tx) error { busy = acc.Tx(ctx, insert("x")); return nil }); err != nil || !errors.Is(busy, ErrDeferredBusy) {
		t.Fatalf("nested Tx: %v, %v", err, busy)
	}
	if err := d.Commit(ctx, insert("last")); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, _ := pool.Query(ctx, `SELECT v FROM t ORDER BY v`)
	for rows.Next() {
		var v string
		_ = rows.Scan(&v)
		got = append(got, v)
	}
	if rows.Err() != nil || len(got) != 3 || got[0] != "a" || got[1] != "c" || got[2] != "last" {
		t.Fatalf("committed %v (%v)", got, rows.Err())
	}
	if eng.Report().InFlight != 0 {
		t.Fatalf("%d permits held after Commit", eng.Report().InFlight)
	}
	if err := acc.Tx(ctx, insert("late")); !errors.Is(err, ErrDeferredClosed) {
		t.Fatalf("Tx after Commit: %v", err)
	}

	var r DeferredCommit
	acc = set.Accessor("acme", permits).DeferCommit(&r)
	if err := acc.Tx(ctx, insert("z")); err != nil {
		t.Fatal(err)
	}
	r.Rollback(ctx)
	if count() != 3 || eng.Report().InFlight != 0 {
		t.Fatalf("after Rollback: %d rows, %d permits", count(), eng.Report().InFlight)
	}

	var f DeferredCommit
	acc = set.Accessor("acme", permits).DeferCommit(&f)
	if err := acc.Tx(ctx, func(tx Tx) error { return boom }); !errors.Is(err, boom) || f.Pending() || !f.RolledBack() {
		t.Fatalf("failed first Tx: %v, pending %v, rolled back %v", err, f.Pending(), f.RolledBack())
	}
	if err := f.Commit(ctx, insert("never")); err != nil || count() != 3 || eng.Report().InFlight != 0 {
		t.Fatalf("Commit with nothing pending: %v, %d rows, %d permits", err, count(), eng.Report().InFlight)
	}
}
