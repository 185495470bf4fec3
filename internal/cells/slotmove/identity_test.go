package slotmove

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/slots"
)

// idWriter inserts accounts of one tenant of the target cell on its own
// connection until stopped, as the target's other tenants do all along,
// and records the ids it was given.
type idWriter struct {
	stop chan struct{}
	done chan struct{}
	ids  []int64
	err  error
}

func startIDWriter(t *testing.T, dsn, table, tenant string, slot int) *idWriter {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &idWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer c.Close(context.Background())
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			var id int64
			q := fmt.Sprintf(`INSERT INTO %s (tenant_id, slot, email) VALUES ($1, $2, $3) RETURNING id`, table)
			if err := c.QueryRow(ctx, q, tenant, slot, fmt.Sprintf("w%d@x", i)).Scan(&id); err != nil {
				w.err = err
				return
			}
			w.ids = append(w.ids, id)
		}
	}()
	return w
}

func (w *idWriter) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// increasing fails unless every id is above the one before: a sequence
// moved back would hand out an id below (or equal to) an earlier one.
func (w *idWriter) increasing(t *testing.T, who string) {
	t.Helper()
	if w.err != nil {
		t.Errorf("%s: insert failed: %v", who, w.err)
	}
	if len(w.ids) == 0 {
		t.Errorf("%s inserted nothing", who)
	}
	for i := 1; i < len(w.ids); i++ {
		if w.ids[i] <= w.ids[i-1] {
			t.Errorf("%s got id %d after %d: the sequence moved back", who, w.ids[i], w.ids[i-1])
			return
		}
	}
}

// TestMoveIdentityWithoutLockOrCollision: the source's ids are far past
// the target's sequence; the target's own tenants insert all through the
// move, and one of them holds an insert open across the freeze (a
// table lock on the target would wait for it and the move would fail);
// inside the freeze, before the fence, the source gets rows of a moving
// tenant whose ids are exactly the next ones the target's sequence would
// hand out (so the streams apply ids past the headroom given before the
// freeze). The move completes, the target's tenants never get an id twice
// or out of order, and the moved tenant's new rows on the target get ids
// above every moved one: without the freeze's advance past the streamed
// ids, or with it before the catch-up to the fence, the first new row
// would collide.
func TestMoveIdentityWithoutLockOrCollision(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, sh := range []string{"c1s0", "c1s1"} {
		for _, tb := range []string{"accounts", "orders"} {
			if _, err := w.conns[sh].Exec(ctx, fmt.Sprintf(`SELECT setval(pg_get_serial_sequence('%s', 'id'), 50000)`, tb)); err != nil {
				t.Fatal(err)
			}
		}
	}
	in := tenantsIn(moveRange, 4)
	w.seed(t, in, 3)
	stayer := tenantsIn(slots.Range{Lo: 16000, Hi: 16383}, 1)[0]
	stayerSlot, _ := slots.Slot(stayer)
	dst := w.conns["c2s0"]
	writer := startIDWriter(t, w.dst[0].DSN, "accounts", stayer, stayerSlot)
	defer writer.end()

	mover := in[0]
	moverSlot, _ := slots.Slot(mover)
	moverSrc := w.conns["c1s0"]
	if moverSlot >= 8192 {
		moverSrc = w.conns["c1s1"]
	}
	held, err := pgx.Connect(ctx, w.dst[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	var heldTx pgx.Tx
	var lateFirst, lateLast int64
	cfg := w.config(t, moveRange)
	cfg.OnPhase = func(phase string) {
		if phase != "settled" {
			return
		}
		writer.end()
		var err error
		if heldTx, err = held.Begin(ctx); err != nil {
			t.Error(err)
			return
		}
		if _, err := heldTx.Exec(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, 'held@x')`, stayer, stayerSlot); err != nil {
			t.Error(err)
			return
		}
		var last int64
		if err := dst.QueryRow(ctx, `SELECT pg_sequence_last_value(pg_get_serial_sequence('accounts', 'id'))`).Scan(&last); err != nil {
			t.Error(err)
			return
		}
		lateFirst, lateLast = last+1, last+50
		if _, err := moverSrc.Exec(ctx, `INSERT INTO accounts (id, tenant_id, slot, email) OVERRIDING SYSTEM VALUE
			SELECT g, $1, $2, 'late' || g || '@x' FROM generate_series($3::bigint, $4::bigint) g`, mover, moverSlot, lateFirst, lateLast); err != nil {
			t.Error(err)
		}
	}
	rep, err := Move(ctx, cfg)
	if heldTx != nil {
		if cerr := heldTx.Commit(ctx); cerr != nil {
			t.Errorf("the insert held open across the freeze: %v", cerr)
		}
	}
	if err != nil {
		t.Fatalf("move with an insert held open on the target: %v", err)
	}
	if lateFirst == 0 {
		t.Fatal("the freeze hook did not run")
	}
	t.Logf("freeze steps: %s", rep.FreezeStepsString())
	writer.increasing(t, "the target's tenant")

	// The moved rows, the late ones included, are on the target.
	var moved, late int64
	if err := dst.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id BETWEEN $2 AND $3) FROM accounts WHERE tenant_id = $1`,
		mover, lateFirst, lateLast).Scan(&moved, &late); err != nil {
		t.Fatal(err)
	}
	if moved != 53 || late != 50 {
		t.Fatalf("the moved tenant has %d accounts on the target (%d of the late ids); want 53 (50)", moved, late)
	}
	var maxMoved int64
	if err := dst.QueryRow(ctx, `SELECT max(id) FROM accounts WHERE slot BETWEEN $1 AND $2`, moveRange.Lo, moveRange.Hi).Scan(&maxMoved); err != nil {
		t.Fatal(err)
	}
	// The moved tenant inserts at the target now.
	prev := maxMoved
	for i := range 60 {
		var id int64
		if err := dst.QueryRow(ctx, `INSERT INTO accounts (tenant_id, slot, email) VALUES ($1, $2, $3) RETURNING id`,
			mover, moverSlot, fmt.Sprintf("new%d@x", i)).Scan(&id); err != nil {
			t.Fatalf("the moved tenant's new row %d on the target: %v", i, err)
		}
		if id <= prev {
			t.Fatalf("the moved tenant's new row got id %d, not above %d (moved ids up to %d)", id, prev, maxMoved)
		}
		prev = id
	}
}

// TestAdvanceSequence: advancing a sequence under concurrent inserts, by
// nextval and (past nextvalAdvanceLimit) by setval under the table lock,
// reaches the wanted value and never hands an id out twice; a table
// without a primary key keeps duplicates, so one would be seen.
func TestAdvanceSequence(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.CreateDB(t, "advance_seq")
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE things (id bigint GENERATED ALWAYS AS IDENTITY, tenant_id text, slot int, email text)`); err != nil {
		t.Fatal(err)
	}
	var writers []*idWriter
	for i := range 3 {
		writers = append(writers, startIDWriter(t, dsn, "things", fmt.Sprint("w", i), 1))
	}
	defer func() {
		for _, w := range writers {
			w.end()
		}
	}()
	check := func(want int64) {
		t.Helper()
		got, err := advanceSequence(ctx, c, `"things"`, "id", want)
		if err != nil {
			t.Fatal(err)
		}
		if got < want {
			t.Fatalf("advanced to %d; want at least %d", got, want)
		}
		var next int64
		if err := c.QueryRow(ctx, `INSERT INTO things (tenant_id, slot, email) VALUES ('t', 1, 'x') RETURNING id`).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next <= want {
			t.Fatalf("the next id after advancing to %d is %d", want, next)
		}
	}
	check(200_000) // by nextval, in two statements
	old := nextvalAdvanceLimit
	nextvalAdvanceLimit = 1000
	defer func() { nextvalAdvanceLimit = old }()
	check(1_000_000_000) // by setval under the lock
	check(5)             // already past: nothing
	for i, w := range writers {
		w.end()
		w.increasing(t, fmt.Sprint("writer ", i))
	}
	var dups int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM things GROUP BY id HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups > 0 {
		t.Errorf("%d ids handed out twice", dups)
	}
}
