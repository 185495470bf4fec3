package slotmove

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/slots"
)

// TestFenceWaitsForWritersInFlight: installed, the fence refuses nothing;
// raised, it refuses new writes to the range at once, lets other slots'
// writes through without waiting, and returns only once a transaction
// that wrote to the range before it was raised has ended; dropped, the
// range is writable again.
func TestFenceWaitsForWritersInFlight(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	cfg := w.config(t, moveRange).withDefaults()
	mv, err := open(ctx, cfg, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer mv.close()
	in := tenantsIn(slots.Range{Lo: moveRange.Lo, Hi: 8191}, 2) // on c1s0
	out := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 1)
	n := 0
	insert := func(c interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, tenant string) error {
		s, _ := slots.Slot(tenant)
		n++
		_, err := c.Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, $3)`, tenant, s, fmt.Sprintf("f%d@x", n))
		return err
	}
	fenced := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "55000"
	}

	if err := mv.installFence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insert(w.conns["c1s0"], in[0]); err != nil {
		t.Fatalf("a write to the range with the fence installed but down: %v", err)
	}
	// A writer in flight: it wrote to the range before the fence rose.
	other, err := pgx.Connect(ctx, w.src[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := insert(tx, in[1]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mv.activateFence(ctx) }()
	// The fence is up while it waits: new writes to the range fail, writes
	// to other slots go through.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := insert(w.conns["c1s0"], in[0])
		if fenced(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the fence did not rise within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := insert(w.conns["c1s0"], out[0]); err != nil {
		t.Fatalf("a write outside the range under the fence: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("activateFence returned (%v) while a transaction that wrote to the range is open", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("activateFence still waits 10s after the writer committed")
	}
	// Installing again takes no lock and keeps the fence up.
	if err := mv.fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insert(w.conns["c1s0"], in[0]); !fenced(err) {
		t.Fatalf("a write to the range after the fence was installed again: %v; want SQLSTATE 55000", err)
	}
	// The mover itself passes.
	err = pgx.BeginFunc(ctx, w.conns["c1s0"], func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL cellgate.slot_move = 'on'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM accounts WHERE tenant_id = $1`, in[1])
		return err
	})
	if err != nil {
		t.Fatalf("the mover's delete under the fence: %v", err)
	}
	if err := mv.unfence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insert(w.conns["c1s0"], in[0]); err != nil {
		t.Fatalf("a write to the range after the fence was dropped: %v", err)
	}
	var left int
	if err := w.conns["c1s0"].QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'cellgate_fence_%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("the fence's flag is left behind (%d, %v)", left, err)
	}
}
