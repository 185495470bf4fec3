package slotmove

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Identity sequences. The moved rows keep their ids (OVERRIDING SYSTEM
// VALUE), which the source's sequences handed out; the target shard's
// sequence hands out the ids of its own tenants' inserts all along and,
// once the map is switched, those of the moved tenants. A moved tenant's
// new row must never get an id one of its moved rows has, and no tenant of
// the target may ever get an id twice.
//
// The invariant, per target shard receiving part of the range and per
// identity column: when the map switches, the sequence is at or past every
// id of the range's rows on that shard. Why it holds:
//
//   - Before the switch only the mover writes the range on the target (the
//     map sends its tenants to the source; a fresh move starts on a target
//     holding none of the range's rows), by the copy and by the streams.
//   - Before the compare rounds, advanceIdentity(identFull) reads the
//     largest id of the range's rows on the target (the copy's and what the
//     streams applied so far: the streams are applied by this goroutine, so
//     none is half-applied meanwhile) and moves the sequence past it.
//   - Every row the streams apply later has its ids noted (noteIdentity)
//     before it is sent. Inside the freeze, once the streams have
//     delivered everything up to the fence (no write to the range can land
//     at the source after it, and nothing is applied after this step),
//     advanceIdentity(identFreeze) moves the sequence past the largest
//     noted id where it is not there already.
//   - The sequence only ever moves forward: it is advanced with nextval,
//     which PostgreSQL serialises against every other session's nextval,
//     so no value handed out before is handed out again. (setval after
//     reading the current value would race with the target's inserts and
//     could move it back; it is used only under a table lock that keeps
//     every inserter out, for a jump too long to take with nextval.)
//     Each session draws from the shared sequence itself:
//     checkIdentityCache refuses a target sequence whose sessions cache
//     values, which one of them could hand out after the switch below
//     the moved ids.
//
// So every id the target's sequence hands out after the switch is above
// every moved id, and above every id it handed out before. None of it takes
// a table lock in the usual case: the target's own writers never wait.
// To leave the freeze nothing to do, the sequences are also moved
// headroom past the source's (identTopUp, just before the freeze): the
// ids the moving tenants get at the source in the last moments before the
// fence are then already covered.

// identityHeadroom is how far past the source's sequence advanceIdentity
// moves the target's before the freeze: more than the source hands out
// between that moment and the fence (the freeze's first ~100 ms), so that
// inside the freeze no sequence needs advancing.
const identityHeadroom = 10_000

// nextvalAdvanceLimit is the longest jump advanceSequence takes with
// nextval (about 1 µs of server time each); a longer one (cells whose
// sequences are far apart) is a setval under a brief table lock, taken
// before the freeze. A variable so that tests can lower it.
var nextvalAdvanceLimit int64 = 1 << 21

// nextvalChunk is how many nextval calls one statement makes, so that no
// statement runs long.
const nextvalChunk = 1 << 17

// identMode says which ids advanceIdentity moves the sequences past.
type identMode int

const (
	// identFull: the largest id of the range's rows on the target (read),
	// every streamed id and the source's sequence plus headroom.
	identFull identMode = iota
	// identTopUp: every streamed id and the source's sequence plus
	// headroom; no read of the rows.
	identTopUp
	// identFreeze: the streamed ids, only where one passed the last
	// advance; identFull's read of the rows where this run has not
	// advanced yet (a resumed run).
	identFreeze
)

// advanceIdentity moves the identity sequences of the target shards that
// receive part of the range forward, as mode says (see above); the shards
// at once. It never moves a sequence back.
func (mv *mover) advanceIdentity(ctx context.Context, mode identMode) error {
	// The sources' sequences, read first: their connections are not the
	// targets'.
	srcLast := map[identKey]int64{} // dst = source shard index
	if mode != identFreeze {
		for i, sc := range mv.source {
			if !mv.involved[i] {
				continue
			}
			for _, t := range mv.tables {
				for _, col := range t.identity {
					var last int64
					if err := sc.conn.QueryRow(ctx, `SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence($1, $2)::regclass), 0)`,
						t.ident, col).Scan(&last); err != nil {
						return fmt.Errorf("slotmove: identity %s.%s on source %s: %w", t.name, col, sc.name, err)
					}
					srcLast[identKey{i, t.name, col}] = last
				}
			}
		}
	}
	errs := make([]error, len(mv.target))
	var wg sync.WaitGroup
	for d, dst := range mv.target {
		var feeds []int // the source shards whose rows d receives
		for _, seg := range mv.segs {
			if seg.dst == d && !slices.Contains(feeds, seg.src) {
				feeds = append(feeds, seg.src)
			}
		}
		if len(feeds) == 0 {
			continue
		}
		type job struct {
			t    *tableInfo
			col  string
			st   *identState
			want int64
			scan bool
		}
		var jobs []job
		for ti := range mv.tables {
			t := &mv.tables[ti]
			for _, col := range t.identity {
				st := mv.identityOf(identKey{d, t.name, col})
				j := job{t: t, col: col, st: st, scan: mode == identFull || !st.advanced}
				if st.streamedMax == math.MaxInt64 {
					// A streamed value that did not parse: read what it
					// was from the rows instead.
					j.scan = true
				} else {
					j.want = st.streamedMax
				}
				if mode == identFreeze && !j.scan && st.streamedMax <= st.bumped {
					continue
				}
				for _, s := range feeds {
					if last := srcLast[identKey{s, t.name, col}]; last > 0 {
						j.want = max(j.want, last+identityHeadroom)
					}
				}
				jobs = append(jobs, j)
			}
		}
		if len(jobs) == 0 {
			continue
		}
		wg.Go(func() {
			for _, j := range jobs {
				want := j.want
				if j.scan {
					var m int64
					if err := dst.conn.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(max(%s), 0) FROM %s WHERE slot BETWEEN $1 AND $2",
						pgx.Identifier{j.col}.Sanitize(), j.t.ident), mv.cfg.Range.Lo, mv.cfg.Range.Hi).Scan(&m); err != nil {
						errs[d] = fmt.Errorf("slotmove: identity %s.%s on target %s: %w", j.t.name, j.col, dst.name, err)
						return
					}
					want = max(want, m)
				}
				now, err := advanceSequence(ctx, dst.conn, j.t.ident, j.col, want)
				if err != nil {
					errs[d] = fmt.Errorf("slotmove: identity %s.%s on target %s: %w", j.t.name, j.col, dst.name, err)
					return
				}
				j.st.bumped, j.st.advanced = max(j.st.bumped, now), true
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// advanceSequence moves the identity sequence of table.col (table quoted)
// to at least want and returns where it is: nothing when it is there
// already, else nextval until it is, or for a jump above
// nextvalAdvanceLimit a setval under a SHARE ROW EXCLUSIVE lock on the
// table (no insert can draw a value meanwhile), never lower than the
// sequence's value. A column without a sequence returns want.
func advanceSequence(ctx context.Context, c *pgx.Conn, table, col string, want int64) (int64, error) {
	var seq *string
	var last *int64
	if err := c.QueryRow(ctx, `SELECT s::text, pg_sequence_last_value(s) FROM (SELECT pg_get_serial_sequence($1, $2)::regclass AS s) q`,
		table, col).Scan(&seq, &last); err != nil {
		return 0, err
	}
	if seq == nil {
		return want, nil
	}
	cur := int64(0) // a sequence never called hands out its start next
	if last != nil {
		cur = *last
	}
	for cur < want {
		gap := want - cur
		if gap > nextvalAdvanceLimit {
			return setSequenceLocked(ctx, c, table, *seq, want)
		}
		// Each nextval returns more than the one before it in this session,
		// whatever other sessions draw meanwhile.
		if err := c.QueryRow(ctx, `SELECT max(nextval($1::regclass)) FROM generate_series(1, $2::bigint)`,
			*seq, min(gap, nextvalChunk)).Scan(&cur); err != nil {
			return 0, err
		}
	}
	return cur, nil
}

// setSequenceLocked sets seq to at least want while holding a lock on
// table that keeps every inserter out, so reading its value and setting
// it cannot race with a nextval.
func setSequenceLocked(ctx context.Context, c *pgx.Conn, table, seq string, want int64) (int64, error) {
	var now int64
	err := retryLocks(ctx, func() error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT setval($1::regclass, GREATEST(coalesce(pg_sequence_last_value($1::regclass), 0), $2::bigint))`,
				seq, want).Scan(&now)
		})
	})
	return now, err
}

// checkIdentityCache refuses target identity sequences that cache more
// than one value per session: a session holding cached values from before
// the move would hand them out after it, below the moved ids.
func (mv *mover) checkIdentityCache(ctx context.Context) error {
	for _, dst := range mv.target {
		for _, t := range mv.tables {
			for _, col := range t.identity {
				var seq *string
				var cache *int64
				if err := dst.conn.QueryRow(ctx, `SELECT s::text, (SELECT seqcache FROM pg_sequence WHERE seqrelid = s)
					FROM (SELECT pg_get_serial_sequence($1, $2)::regclass AS s) q`, t.ident, col).Scan(&seq, &cache); err != nil {
					return fmt.Errorf("slotmove: identity %s.%s on target %s: %w", t.name, col, dst.name, err)
				}
				if seq != nil && cache != nil && *cache > 1 {
					return fmt.Errorf("slotmove: identity sequence %s of %s.%s on target %s caches %d values per session, which could hand a moved id out again after the move; fix: ALTER SEQUENCE %s CACHE 1",
						*seq, t.name, col, dst.name, *cache, *seq)
				}
			}
		}
	}
	return nil
}
