package slotmove

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/slots"
)

// orderKey is an order of a tenant.
type orderKey struct {
	tenant string
	id     int64
}

// expect is what a writer knows of an order from its acknowledged writes.
type expect struct {
	exists bool
	amount int64
}

// writer plays an app's handlers for a few tenants: it routes every write
// by the slot map as a router would (refused while the range is frozen),
// and records only what the database acknowledged.
type writer struct {
	w       *world
	tenants []string
	conns   map[string]*pgx.Conn
	rng     *rand.Rand

	model     map[orderKey]expect
	uncertain map[orderKey]bool // a write that failed without a verdict
	lostIns   int               // inserts that failed without a verdict
	acked     struct{ ins, upd, del int }
	fenced    int
	refusals  []time.Time // when the map refused (range frozen)
}

func (wr *writer) shardFor(r *cells.CellRouter, tenant string) (conn *pgx.Conn, frozen bool) {
	s, _ := slots.Slot(tenant)
	if r.Frozen(s) {
		return nil, true
	}
	c, _ := r.ForSlot(s)
	switch {
	case c.Name == "cell-2":
		return wr.conns["c2s0"], false
	case s >= 8192:
		return wr.conns["c1s1"], false
	default:
		return wr.conns["c1s0"], false
	}
}

// step does one write; a fenced write (SQLSTATE 55000) is a refusal the
// app would retry, not an acknowledged write.
func (wr *writer) step(ctx context.Context) {
	_, r, err := cells.ReadSlotMap(wr.w.mapFile)
	if err != nil {
		return // the file is replaced atomically; a read error is transient
	}
	tenant := wr.tenants[wr.rng.IntN(len(wr.tenants))]
	conn, frozen := wr.shardFor(r, tenant)
	if frozen {
		wr.refusals = append(wr.refusals, time.Now())
		time.Sleep(2 * time.Millisecond)
		return
	}
	var keys []orderKey
	for k, e := range wr.model {
		if k.tenant == tenant && e.exists && !wr.uncertain[k] {
			keys = append(keys, k)
			if len(keys) > 20 {
				break
			}
		}
	}
	verdict := func(err error) (ok, unknown bool) {
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return true, false
		case errors.As(err, &pe) && pe.Code == "55000":
			wr.fenced++
			return false, false
		default:
			return false, true
		}
	}
	op := wr.rng.IntN(10)
	switch {
	case op < 5 || len(keys) == 0:
		s, _ := slots.Slot(tenant)
		amount := int64(wr.rng.IntN(1_000_000))
		var id int64
		err := conn.QueryRow(ctx, `INSERT INTO orders (tenant_id, slot, account_id, amount_cents, note)
			SELECT $1, $2, min(id), $3, 'live' FROM accounts WHERE tenant_id = $1 RETURNING id`, tenant, s, amount).Scan(&id)
		ok, unknown := verdict(err)
		if ok {
			wr.model[orderKey{tenant, id}] = expect{exists: true, amount: amount}
			wr.acked.ins++
		} else if unknown {
			wr.lostIns++
		}
	case op < 8:
		k := keys[wr.rng.IntN(len(keys))]
		amount := int64(wr.rng.IntN(1_000_000))
		tag, err := conn.Exec(ctx, `UPDATE orders SET amount_cents = $3, note = 'updated' WHERE tenant_id = $1 AND id = $2`, k.tenant, k.id, amount)
		ok, unknown := verdict(err)
		switch {
		case ok && tag.RowsAffected() == 1:
			wr.model[k] = expect{exists: true, amount: amount}
			wr.acked.upd++
		case ok:
			wr.uncertain[k] = true // the row is not where the model says
		case unknown:
			wr.uncertain[k] = true
		}
	default:
		k := keys[wr.rng.IntN(len(keys))]
		tag, err := conn.Exec(ctx, `DELETE FROM orders WHERE tenant_id = $1 AND id = $2`, k.tenant, k.id)
		ok, unknown := verdict(err)
		switch {
		case ok && tag.RowsAffected() == 1:
			wr.model[k] = expect{exists: false}
			wr.acked.del++
		case ok:
			wr.uncertain[k] = true
		case unknown:
			wr.uncertain[k] = true
		}
	}
}

// seedBulk gives each tenant one account and perTenant orders, written
// set-wise on its source shard.
func (w *world) seedBulk(t *testing.T, tenants []string, perTenant int) {
	t.Helper()
	ctx := context.Background()
	for _, tn := range tenants {
		s, _ := slots.Slot(tn)
		c := w.conns["c1s0"]
		if s >= 8192 {
			c = w.conns["c1s1"]
		}
		if _, err := c.Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email, name) VALUES ($1, $2, 'owner@'||$1, 'owner')`, tn, s); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, `INSERT INTO orders (tenant_id, slot, account_id, amount_cents, note)
			SELECT $1, $2, a.id, g, 'seed ' || g FROM accounts a, generate_series(1, $3::int) g WHERE a.tenant_id = $1`, tn, s, perTenant); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMoveWhileWriting moves a range while writers insert, update and
// delete its tenants' orders through the slot map for the whole move:
// every acknowledged insert is at the target exactly once and gone from
// the source, every acknowledged update is the target's value, every
// acknowledged delete stays deleted, and the move ends with no
// replication slot or publication left. It logs the figures (rows, copy
// rate, freeze, peak lag); SLOTMOVE_TEST_ROWS sets the preloaded orders
// (default 40,000).
func TestMoveWhileWriting(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	rows := 40_000
	if v := os.Getenv("SLOTMOVE_TEST_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SLOTMOVE_TEST_ROWS: %v", err)
		}
		rows = n
	}
	in := tenantsIn(moveRange, 8)
	outside := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 2)
	w.seedBulk(t, in, rows/len(in))
	w.seedBulk(t, outside, 10)

	// Two writers, each with its own tenants, so the last acknowledged
	// write of a row is well defined.
	var writers []*writer
	for i := range 2 {
		wr := &writer{w: w, tenants: in[i*4 : i*4+4], conns: map[string]*pgx.Conn{}, rng: rand.New(rand.NewPCG(uint64(i), 7)),
			model: map[orderKey]expect{}, uncertain: map[orderKey]bool{}}
		for _, sh := range append(append([]Shard(nil), w.src...), w.dst...) {
			c, err := pgx.Connect(ctx, sh.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			wr.conns[sh.Name] = c
		}
		for _, tn := range wr.tenants {
			s, _ := slots.Slot(tn)
			c := w.conns["c1s0"]
			if s >= 8192 {
				c = w.conns["c1s1"]
			}
			r, err := c.Query(ctx, `SELECT id, amount_cents FROM orders WHERE tenant_id = $1`, tn)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
				var id, amount int64
				if err := r.Scan(&id, &amount); err != nil {
					t.Fatal(err)
				}
				wr.model[orderKey{tn, id}] = expect{exists: true, amount: amount}
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		}
		writers = append(writers, wr)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, wr := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				wr.step(wctx)
				time.Sleep(time.Millisecond) // an app's pace, not a flood
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	cfg := w.config(t, moveRange)
	cfg.ChunkSlots = 1024
	start := time.Now()
	rep, err := Move(ctx, cfg)
	took := time.Since(start)
	time.Sleep(300 * time.Millisecond) // writes go on at the target
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	// The figures.
	var copied int64
	for _, n := range rep.Copied {
		copied += n
	}
	var first, last time.Time
	var acked struct{ ins, upd, del, fenced int }
	for _, wr := range writers {
		for _, at := range wr.refusals {
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		acked.ins += wr.acked.ins
		acked.upd += wr.acked.upd
		acked.del += wr.acked.del
		acked.fenced += wr.fenced
	}
	t.Logf("moved %d rows (initial copy %s, %.0f rows/s), %d changes streamed, peak lag %d bytes, freeze %s (writers refused from first to last: %s), %d rows verified in the freeze, move %s; acknowledged %d inserts, %d updates, %d deletes; %d writes fenced",
		copied, rep.CopyTime.Round(time.Millisecond), float64(copied)/rep.CopyTime.Seconds(), rep.Streamed, rep.PeakLagBytes,
		rep.Freeze.Round(time.Millisecond), last.Sub(first).Round(time.Millisecond), rep.FreezeVerified, took.Round(time.Millisecond),
		acked.ins, acked.upd, acked.del, acked.fenced)
	if rep.Streamed == 0 || acked.ins == 0 || acked.upd == 0 || acked.del == 0 {
		t.Fatalf("the writers did not exercise the stream: %d changes streamed, acknowledged %+v", rep.Streamed, acked)
	}

	// The guarantees.
	dst := w.conns["c2s0"]
	for _, wr := range writers {
		for _, tn := range wr.tenants {
			got := map[int64]int64{}
			r, err := dst.Query(ctx, `SELECT id, amount_cents FROM orders WHERE tenant_id = $1`, tn)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next() {
				var id, amount int64
				if err := r.Scan(&id, &amount); err != nil {
					t.Fatal(err)
				}
				got[id] = amount
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			extra := 0
			for id := range got {
				if _, ok := wr.model[orderKey{tn, id}]; !ok {
					extra++
				}
			}
			if extra > wr.lostIns {
				t.Errorf("%s: %d rows at the target that no write explains (%d inserts without a verdict)", tn, extra, wr.lostIns)
			}
			for k, e := range wr.model {
				if k.tenant != tn || wr.uncertain[k] {
					continue
				}
				amount, ok := got[k.id]
				switch {
				case e.exists && !ok:
					t.Errorf("%s order %d: acknowledged, missing at the target", tn, k.id)
				case e.exists && amount != e.amount:
					t.Errorf("%s order %d: target has %d, last acknowledged write %d", tn, k.id, amount, e.amount)
				case !e.exists && ok:
					t.Errorf("%s order %d: acknowledged delete, back at the target", tn, k.id)
				}
			}
		}
	}
	for _, sh := range []string{"c1s0", "c1s1"} {
		for _, tb := range []string{"accounts", "orders"} {
			if n := count(t, w.conns[sh], tb, moveRange); n != 0 {
				t.Errorf("%s.%s still has %d rows of the range", sh, tb, n)
			}
		}
		if n := count(t, w.conns[sh], "orders", slots.Range{Lo: 0, Hi: 8000}); sh == "c1s0" && n != 20 {
			t.Errorf("tenants outside the range: %d orders; want 20", n)
		}
	}
	assertNoReplication(t, w)
}

// assertNoReplication fails if a source shard still holds a move's
// replication slot or publication.
func assertNoReplication(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	for _, sh := range w.src {
		var slotsLeft, pubs int
		if err := w.conns[sh.Name].QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 AND database = current_database()`, SlotPrefix+"%").Scan(&slotsLeft); err != nil {
			t.Fatal(err)
		}
		if err := w.conns[sh.Name].QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname LIKE $1`, SlotPrefix+"%").Scan(&pubs); err != nil {
			t.Fatal(err)
		}
		if slotsLeft != 0 || pubs != 0 {
			t.Errorf("%s: %d replication slots and %d publications of moves left", sh.Name, slotsLeft, pubs)
		}
	}
}
