package slotmove

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/slots"
)

var errCrash = errors.New("crash (test)")

// rangeRows returns "tenant:id" → "amount note" of the range's orders on
// the given shards.
func rangeRows(t *testing.T, conns ...*pgx.Conn) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range conns {
		rows, err := c.Query(context.Background(), `SELECT tenant_id || ':' || id, amount_cents || ' ' || note FROM orders WHERE slot BETWEEN $1 AND $2`, moveRange.Lo, moveRange.Hi)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// writeThroughMap updates one order and deletes another of each moving
// tenant on whichever side the map gives the range to, as an app would
// between a crash and the re-run; it does nothing while the range is
// frozen (the router refuses those tenants).
func (w *world) writeThroughMap(t *testing.T, tenants []string) {
	t.Helper()
	ctx := context.Background()
	_, r, err := cells.ReadSlotMap(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range tenants {
		s, _ := slots.Slot(tn)
		if r.Frozen(s) {
			continue
		}
		c := w.conns["c2s0"]
		if cell, _ := r.ForSlot(s); cell.Name == "cell-1" {
			c = w.conns["c1s0"]
			if s >= 8192 {
				c = w.conns["c1s1"]
			}
		}
		if _, err := c.Exec(ctx, `UPDATE orders SET amount_cents = amount_cents + 1000, note = 'after crash' WHERE tenant_id = $1 AND id = (SELECT min(id) FROM orders WHERE tenant_id = $1)`, tn); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, `DELETE FROM orders WHERE tenant_id = $1 AND id = (SELECT max(id) FROM orders WHERE tenant_id = $1)`, tn); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMoveResumesAfterCrash stops the move dead (no clean-up, its
// connections closed as by a killed process) at each point in turn, lets
// the app write through the map, and runs it again: the move completes,
// the target holds exactly the rows the source had with every write, and
// no replication slot or publication is left.
func TestMoveResumesAfterCrash(t *testing.T) {
	for _, point := range []string{"copying", "copied", "streaming", "fenced", "verified", "switched"} {
		t.Run(point, func(t *testing.T) {
			w := newWorld(t)
			ctx := context.Background()
			in := tenantsIn(moveRange, 4)
			w.seedBulk(t, in, 50)
			cfg := w.config(t, moveRange)
			cfg.crash = func(p string) error {
				if p == point {
					return errCrash
				}
				return nil
			}
			if _, err := Move(ctx, cfg); !errors.Is(err, errCrash) {
				t.Fatalf("crash at %s: %v", point, err)
			}
			w.writeThroughMap(t, in)
			// What the app sees: the source's rows until the switch, the
			// target's after it.
			want := rangeRows(t, w.conns["c1s0"], w.conns["c1s1"])
			if point == "switched" {
				want = rangeRows(t, w.conns["c2s0"])
			}
			cfg.crash = nil
			rep, err := Move(ctx, cfg)
			if err != nil {
				t.Fatalf("re-run after a crash at %s: %v", point, err)
			}
			t.Logf("re-run resumed at %q", rep.Resumed)
			got := rangeRows(t, w.conns["c2s0"])
			if len(got) != len(want) || len(got) == 0 {
				t.Errorf("target has %d orders of the range; want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("order %s at the target: %q; want %q", k, got[k], v)
				}
			}
			if n := len(rangeRows(t, w.conns["c1s0"], w.conns["c1s1"])); n != 0 {
				t.Errorf("source still has %d orders of the range", n)
			}
			assertNoReplication(t, w)
			if _, err := os.Stat(cfg.StateFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file left: %v", err)
			}
		})
	}
}

// TestStatusAndAbort: a move that died while streaming leaves its slots,
// which Status lists; Abort drops them, gives the range back unfrozen
// with the source untouched, and a new move then succeeds.
func TestStatusAndAbort(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	in := tenantsIn(moveRange, 4)
	w.seedBulk(t, in, 20)
	before := rangeRows(t, w.conns["c1s0"], w.conns["c1s1"])
	cfg := w.config(t, moveRange)
	cfg.crash = func(p string) error {
		if p == "fenced" {
			return errCrash
		}
		return nil
	}
	if _, err := Move(ctx, cfg); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	st, err := Status(ctx, append(append([]Shard(nil), w.src...), w.dst...))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Shard != "c1s0" || st[1].Shard != "c1s1" || st[0].Slot != fmt.Sprintf("%s%d_%d_0", SlotPrefix, moveRange.Lo, moveRange.Hi) {
		t.Fatalf("status %+v; want the move's two slots", st)
	}
	cfg.crash = nil
	if err := Abort(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if st, err := Status(ctx, w.src); err != nil || len(st) != 0 {
		t.Fatalf("status after abort: %+v %v", st, err)
	}
	assertNoReplication(t, w)
	_, r, err := cells.ReadSlotMap(w.mapFile)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := r.ForSlot(moveRange.Lo); c.Name != "cell-1" || r.Frozen(moveRange.Lo) {
		t.Fatalf("after abort slot %d is on %s (frozen %v)", moveRange.Lo, c.Name, r.Frozen(moveRange.Lo))
	}
	if n := len(rangeRows(t, w.conns["c2s0"])); n != 0 {
		t.Errorf("abort left %d orders at the target", n)
	}
	// The fence is gone and the source is as it was.
	w.writeThroughMap(t, in[:1])
	if got := rangeRows(t, w.conns["c1s0"], w.conns["c1s1"]); len(got) != len(before)-1 {
		t.Errorf("source has %d orders after abort and one delete; want %d", len(got), len(before)-1)
	}
	if _, err := Move(ctx, cfg); err != nil {
		t.Fatalf("move after abort: %v", err)
	}
	assertNoReplication(t, w)
}
