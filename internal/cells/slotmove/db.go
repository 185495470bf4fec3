package slotmove

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/slots"
)

// mover holds the open connections of one move.
type mover struct {
	cfg    Config
	log    *slog.Logger
	source []*shardConn // by source shard index
	target []*shardConn
	srcMap *slots.Map
	dstMap *slots.Map
	segs   []segment
	tables []tableInfo
	// involved marks, by source shard index, the shards that hold part of
	// the range: only they are copied from and streamed (a slot on any
	// other would decode its server's whole WAL for nothing).
	involved []bool

	// streams are the replication connections, by source shard.
	streams []*stream
	// stmts are the statements prepared on each target shard's
	// connection: SQL → name.
	stmts map[int]map[string]string
	// streamed counts the changes applied from the streams; peakLag is
	// the largest distance in bytes between a server's WAL position and
	// what had been applied.
	streamed    int64
	peakLag     int64
	peakLagTime time.Duration
	// tracking, once on, records in dirty every key the streams change:
	// what the verify inside the freeze must look at again. mismatched
	// holds the keys the full verify found different.
	tracking   bool
	dirty      map[string]map[string]rowKey
	mismatched map[string]map[string]rowKey

	// http asks the routers which slot map they use (Config.Routers).
	http *http.Client

	// identity is, per target shard and identity column, what this run
	// knows of it: the value advanceIdentity last moved the sequence to,
	// and the largest value the streams have written since the move began
	// (a value that does not parse as an integer counts as unbounded).
	// Inside the freeze, a sequence already past every streamed value
	// needs nothing (identity.go).
	identity map[identKey]*identState
}

// identKey names one identity column on one target shard.
type identKey struct {
	dst           int
	table, column string
}

// identState is what the run knows of one identity column (see
// mover.identity).
type identState struct {
	bumped      int64 // the sequence is at least this (this run's last advance)
	advanced    bool  // this run has advanced it (a resumed run has not)
	streamedMax int64 // the largest value the streams wrote; math.MaxInt64 when one did not parse
}

// noteIdentity records the identity values of a row the stream wrote to
// target shard dst.
func (mv *mover) noteIdentity(dst int, ri *relInfo, vals [][]byte) {
	for _, c := range ri.identCols {
		if vals[c] == nil {
			continue
		}
		v, err := strconv.ParseInt(string(vals[c]), 10, 64)
		if err != nil {
			v = math.MaxInt64
		}
		st := mv.identityOf(identKey{dst, ri.t.name, ri.cols[c]})
		st.streamedMax = max(st.streamedMax, v)
	}
}

func (mv *mover) identityOf(k identKey) *identState {
	st := mv.identity[k]
	if st == nil {
		st = &identState{}
		mv.identity[k] = st
	}
	return st
}

// rowKey is a row's primary key (text values) and its slot.
type rowKey struct {
	slot int
	key  [][]byte
}

func (mv *mover) markDirty(t *tableInfo, slot int, key [][]byte) {
	if mv.tracking {
		addKey(mv.dirty, t.name, rowKey{slot: slot, key: key})
	}
}

func addKey(set map[string]map[string]rowKey, table string, k rowKey) {
	m := set[table]
	if m == nil {
		m = map[string]rowKey{}
		set[table] = m
	}
	m[joinKey(k.key)] = k
}

func joinKey(key [][]byte) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = string(k)
	}
	return strings.Join(parts, "\x00")
}

type shardConn struct {
	name string
	conn *pgx.Conn
}

// segment is a run of slots with one source shard and one target shard,
// at most ChunkSlots long: the unit of copy, verify and delete.
type segment struct {
	rg       slots.Range
	src, dst int
}

// tableInfo is what the SQL needs of a table.
type tableInfo struct {
	name     string
	ident    string   // quoted name
	cols     []string // quoted column names, in order; generated columns left out
	identity []string // identity column names (unquoted)
	list     string   // cols joined
	pk       []string // primary key column names (unquoted), in key order
	pkTypes  []string // their SQL types
}

// pkList is the quoted primary key columns, joined.
func (t *tableInfo) pkList() string {
	q := make([]string, len(t.pk))
	for i, c := range t.pk {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// deleteByKey deletes a row by its primary key, given as parameters.
func (t *tableInfo) deleteByKey() string {
	w := make([]string, len(t.pk))
	for i, c := range t.pk {
		w[i] = fmt.Sprintf("%s = $%d", pgx.Identifier{c}.Sanitize(), i+1)
	}
	return fmt.Sprintf("DELETE FROM %s WHERE %s", t.ident, strings.Join(w, " AND "))
}

// sessionParams make row text (the checksum input) identical on both
// sides whatever the servers' defaults.
var sessionParams = map[string]string{
	"timezone":           "UTC",
	"datestyle":          "ISO, MDY",
	"intervalstyle":      "postgres",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
	"application_name":   "cellgate-slotmove",
}

func open(ctx context.Context, cfg Config, log *slog.Logger) (*mover, error) {
	mv := &mover{cfg: cfg, log: log, streams: make([]*stream, len(cfg.Source)),
		dirty: map[string]map[string]rowKey{}, mismatched: map[string]map[string]rowKey{}, identity: map[identKey]*identState{}, stmts: map[int]map[string]string{},
		http: &http.Client{Timeout: time.Second}}
	var err error
	if mv.srcMap, err = shardMap(cfg.Source); err != nil {
		return nil, fmt.Errorf("slotmove: source cell %s: %w", cfg.From, err)
	}
	if mv.dstMap, err = shardMap(cfg.Target); err != nil {
		return nil, fmt.Errorf("slotmove: target cell %s: %w", cfg.To, err)
	}
	for _, s := range cfg.Source {
		for _, d := range cfg.Target {
			if s.DSN == d.DSN {
				return nil, fmt.Errorf("slotmove: source shard %s and target shard %s are the same database", s.Name, d.Name)
			}
		}
	}
	for s := cfg.Range.Lo; s <= cfg.Range.Hi; {
		seg := segment{rg: slots.Range{Lo: s, Hi: s}, src: mv.srcMap.Owner(s), dst: mv.dstMap.Owner(s)}
		for seg.rg.Hi < cfg.Range.Hi && seg.rg.Len() < cfg.ChunkSlots &&
			mv.srcMap.Owner(seg.rg.Hi+1) == seg.src && mv.dstMap.Owner(seg.rg.Hi+1) == seg.dst {
			seg.rg.Hi++
		}
		mv.segs = append(mv.segs, seg)
		s = seg.rg.Hi + 1
	}
	mv.involved = make([]bool, len(cfg.Source))
	for _, seg := range mv.segs {
		mv.involved[seg.src] = true
	}
	connect := func(shards []Shard) ([]*shardConn, error) {
		out := make([]*shardConn, len(shards))
		for i, s := range shards {
			pc, err := pgx.ParseConfig(s.DSN)
			if err != nil {
				return out, fmt.Errorf("slotmove: shard %s: %w", s.Name, err)
			}
			for k, v := range sessionParams {
				pc.RuntimeParams[k] = v
			}
			c, err := pgx.ConnectConfig(ctx, pc)
			if err != nil {
				return out, fmt.Errorf("slotmove: shard %s: %w", s.Name, err)
			}
			out[i] = &shardConn{name: s.Name, conn: c}
		}
		return out, nil
	}
	if mv.source, err = connect(cfg.Source); err != nil {
		mv.close()
		return nil, err
	}
	if mv.target, err = connect(cfg.Target); err != nil {
		mv.close()
		return nil, err
	}
	for _, t := range cfg.Tables {
		ti, err := describe(ctx, mv.source[0].conn, t)
		if err != nil {
			mv.close()
			return nil, err
		}
		for _, sc := range append(append([]*shardConn(nil), mv.source...), mv.target...) {
			other, err := describe(ctx, sc.conn, t)
			if err == nil && other.list != ti.list {
				err = fmt.Errorf("slotmove: table %s has columns (%s) on shard %s but (%s) on shard %s; migrate both cells first",
					t, other.list, sc.name, ti.list, mv.source[0].name)
			}
			if err != nil {
				mv.close()
				return nil, err
			}
		}
		mv.tables = append(mv.tables, ti)
	}
	return mv, nil
}

func shardMap(shards []Shard) (*slots.Map, error) {
	owners := make([]slots.Owner, len(shards))
	for i, s := range shards {
		owners[i] = slots.Owner{Name: s.Name, Slots: s.Slots}
	}
	return slots.Build(owners)
}

func (mv *mover) close() {
	mv.closeStreams()
	for _, group := range [][]*shardConn{mv.source, mv.target} {
		for _, sc := range group {
			if sc != nil {
				_ = sc.conn.Close(context.Background())
			}
		}
	}
}

// describe reads a table's columns from the catalog.
func describe(ctx context.Context, c *pgx.Conn, table string) (tableInfo, error) {
	rows, err := c.Query(ctx, `
		SELECT column_name, is_identity = 'YES'
		FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'
		ORDER BY ordinal_position`, table)
	if err != nil {
		return tableInfo{}, fmt.Errorf("slotmove: describe %s: %w", table, err)
	}
	ti := tableInfo{name: table, ident: pgx.Identifier{table}.Sanitize()}
	hasSlot := false
	for rows.Next() {
		var name string
		var identity bool
		if err := rows.Scan(&name, &identity); err != nil {
			return tableInfo{}, err
		}
		ti.cols = append(ti.cols, pgx.Identifier{name}.Sanitize())
		if identity {
			ti.identity = append(ti.identity, name)
		}
		hasSlot = hasSlot || name == "slot"
	}
	if err := rows.Err(); err != nil {
		return tableInfo{}, fmt.Errorf("slotmove: describe %s: %w", table, err)
	}
	if len(ti.cols) == 0 {
		return tableInfo{}, fmt.Errorf("slotmove: table %s does not exist", table)
	}
	if !hasSlot {
		return tableInfo{}, fmt.Errorf("slotmove: table %s has no slot column; only slot-keyed tables can move", table)
	}
	ti.list = strings.Join(ti.cols, ", ")
	pk, err := c.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, ti.ident)
	if err != nil {
		return tableInfo{}, fmt.Errorf("slotmove: primary key of %s: %w", table, err)
	}
	for pk.Next() {
		var name, typ string
		if err := pk.Scan(&name, &typ); err != nil {
			return tableInfo{}, fmt.Errorf("slotmove: primary key of %s: %w", table, err)
		}
		ti.pk = append(ti.pk, name)
		ti.pkTypes = append(ti.pkTypes, typ)
	}
	if err := pk.Err(); err != nil {
		return tableInfo{}, fmt.Errorf("slotmove: primary key of %s: %w", table, err)
	}
	if len(ti.pk) == 0 {
		return tableInfo{}, fmt.Errorf("slotmove: table %s has no primary key; the stream applies changes by primary key", table)
	}
	return ti, nil
}

// initialCopy creates each source shard's publication and replication
// slot and copies the range's rows from the slot's exported snapshot,
// parents first. (The target's identity sequences move past the copied
// ids later, before the freeze: see identity.go.)
func (mv *mover) initialCopy(ctx context.Context, rep *Report) error {
	start := time.Now()
	lastLog := start
	var total int64
	for i, sc := range mv.source {
		if !mv.involved[i] {
			continue
		}
		snap, err := mv.createReplication(ctx, i)
		if err != nil {
			return err
		}
		err = pgx.BeginTxFunc(ctx, sc.conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snap, "'", "''")+"'"); err != nil {
				return fmt.Errorf("slotmove: snapshot %s on source %s: %w", snap, sc.name, err)
			}
			for _, t := range mv.tables {
				for _, seg := range mv.segs {
					if seg.src != i {
						continue
					}
					n, err := mv.copySegment(ctx, t, seg)
					if err != nil {
						return err
					}
					rep.Copied[t.name] += n
					total += n
					if time.Since(lastLog) >= 2*time.Second {
						lastLog = time.Now()
						mv.log.Info("copying", "phase", "copy", "shard", sc.name, "table", t.name, "rows", total,
							"rows_per_s", int64(float64(total)/max(time.Since(start).Seconds(), 1e-3)))
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		mv.log.Info("copied from snapshot", "shard", sc.name, "rows", total)
		if err := mv.crashAt("copying"); err != nil {
			return err
		}
	}
	rep.CopyTime = time.Since(start)
	rate := float64(total) / max(rep.CopyTime.Seconds(), 1e-3)
	mv.log.Info("initial copy done", "rows", total, "took", rep.CopyTime.Round(time.Millisecond).String(), "rows_per_s", int64(rate))
	return nil
}

// targetEmpty refuses a fresh move onto a target that already holds rows
// of the range (left by a failed move of another tool or run).
func (mv *mover) targetEmpty(ctx context.Context) error {
	for _, t := range mv.tables {
		for _, seg := range mv.segs {
			var n int64
			q := fmt.Sprintf("SELECT count(*) FROM %s WHERE slot BETWEEN $1 AND $2", t.ident)
			if err := mv.target[seg.dst].conn.QueryRow(ctx, q, seg.rg.Lo, seg.rg.Hi).Scan(&n); err != nil {
				return fmt.Errorf("slotmove: count %s on target %s: %w", t.name, mv.target[seg.dst].name, err)
			}
			if n > 0 {
				return fmt.Errorf("slotmove: target %s already holds %d rows of %s in slots %s; run again with -reset-target (ResetTarget) to delete them first", mv.target[seg.dst].name, n, t.name, seg.rg)
			}
		}
	}
	return nil
}

// copySegment streams the segment's rows from the source with COPY into a
// temporary table on the target and inserts the ones not yet there, in
// one target transaction. Rows are never held in memory here.
func (mv *mover) copySegment(ctx context.Context, t tableInfo, seg segment) (int64, error) {
	src, dst := mv.source[seg.src], mv.target[seg.dst]
	tx, err := dst.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("slotmove: target %s: %w", dst.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tmp := pgx.Identifier{"cellgate_move_" + t.name}.Sanitize()
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s) ON COMMIT DROP", tmp, t.ident)); err != nil {
		return 0, fmt.Errorf("slotmove: target %s: %w", dst.name, err)
	}
	pr, pw := io.Pipe()
	srcErr := make(chan error, 1)
	go func() {
		_, err := src.conn.PgConn().CopyTo(ctx, pw, fmt.Sprintf(
			"COPY (SELECT %s FROM %s WHERE slot BETWEEN %d AND %d) TO STDOUT", t.list, t.ident, seg.rg.Lo, seg.rg.Hi))
		pw.CloseWithError(err)
		srcErr <- err
	}()
	_, err = tx.Conn().PgConn().CopyFrom(ctx, pr, fmt.Sprintf("COPY %s (%s) FROM STDIN", tmp, t.list))
	pr.CloseWithError(errors.New("target copy ended"))
	if serr := <-srcErr; serr != nil {
		return 0, fmt.Errorf("slotmove: read %s slots %s from source %s: %w", t.name, seg.rg, src.name, serr)
	}
	if err != nil {
		return 0, fmt.Errorf("slotmove: write %s slots %s to target %s: %w", t.name, seg.rg, dst.name, err)
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(
		"INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %s ON CONFLICT DO NOTHING", t.ident, t.list, t.list, tmp))
	if err != nil {
		return 0, fmt.Errorf("slotmove: insert %s slots %s on target %s: %w", t.name, seg.rg, dst.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("slotmove: target %s: %w", dst.name, err)
	}
	return tag.RowsAffected(), nil
}

// sourceRows counts the range's rows left at the source.
func (mv *mover) sourceRows(ctx context.Context) (int64, error) {
	var total int64
	for _, t := range mv.tables {
		for _, seg := range mv.segs {
			var n int64
			q := fmt.Sprintf("SELECT count(*) FROM %s WHERE slot BETWEEN $1 AND $2", t.ident)
			if err := mv.source[seg.src].conn.QueryRow(ctx, q, seg.rg.Lo, seg.rg.Hi).Scan(&n); err != nil {
				return 0, fmt.Errorf("slotmove: count %s on source %s: %w", t.name, mv.source[seg.src].name, err)
			}
			total += n
		}
	}
	return total, nil
}

// deleteRange deletes the range's rows on one side, children first, one
// segment per transaction. The session marks itself as the mover so the
// fence lets it through.
func (mv *mover) deleteRange(ctx context.Context, side []*shardConn, which string) (map[string]int64, error) {
	out := map[string]int64{}
	for i := len(mv.tables) - 1; i >= 0; i-- {
		t := mv.tables[i]
		for _, seg := range mv.segs {
			i := seg.src
			if which == "target" {
				i = seg.dst
			}
			sc := side[i]
			var n int64
			err := pgx.BeginFunc(ctx, sc.conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL cellgate.slot_move = 'on'"); err != nil {
					return err
				}
				tag, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE slot BETWEEN $1 AND $2", t.ident), seg.rg.Lo, seg.rg.Hi)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return out, fmt.Errorf("slotmove: delete %s slots %s on %s %s: %w", t.name, seg.rg, which, sc.name, err)
			}
			out[t.name] += n
		}
	}
	return out, nil
}

// The fence refuses writes to the range at the source from anyone but the
// mover. It comes in two parts, so that the part inside the freeze blocks
// nobody and waits only for what it must:
//
//   - installFence, before the freeze: a flag (a one-row sequence, read
//     outside any snapshot, so a transaction sees it flip at once, and
//     durable, so the fence survives a crash of the tool) and, per table,
//     triggers on the range's rows that raise SQLSTATE 55000 while the
//     flag is up. Creating a trigger takes a lock that waits for the
//     table's writers and holds back new ones meanwhile; done here, that
//     costs no frozen time.
//   - activateFence, inside the freeze: raise the flag, then wait until
//     every transaction that held a write lock on a moved table at that
//     moment has ended. A write to the range reads the flag after taking
//     that lock, so a transaction that read it down is among those waited
//     for, and every later write is refused: once activateFence returns,
//     no write to the range can still land. New writers never wait, as
//     with CREATE INDEX CONCURRENTLY's wait for older transactions.

// fenceNames are the per-range objects of the fence, quoted: its flag
// sequence, its trigger function and the two triggers per table.
func (mv *mover) fenceNames() (flag, fn, newTrigger, oldTrigger string) {
	base := fmt.Sprintf("cellgate_fence_%d_%d", mv.cfg.Range.Lo, mv.cfg.Range.Hi)
	return pgx.Identifier{base + "_flag"}.Sanitize(), pgx.Identifier{base}.Sanitize(),
		pgx.Identifier{base + "_new"}.Sanitize(), pgx.Identifier{base + "_old"}.Sanitize()
}

// fence installs the fence where it is missing and raises it: the finish
// step's guarantee that nothing is written to the range at the source
// while it is deleted (a resumed move may find the fence gone).
func (mv *mover) fence(ctx context.Context) error {
	if err := mv.installFence(ctx); err != nil {
		return err
	}
	return mv.activateFence(ctx)
}

// installFence creates, on every source shard, the fence's flag (down,
// unless it exists already) and its triggers, all tables of a shard in one
// transaction. A shard that has the triggers already is left alone, so
// installing again takes no lock.
func (mv *mover) installFence(ctx context.Context) error {
	lo, hi := mv.cfg.Range.Lo, mv.cfg.Range.Hi
	flag, fn, nn, on := mv.fenceNames()
	for _, sc := range mv.source {
		err := retryLocks(ctx, func() error {
			return pgx.BeginFunc(ctx, sc.conn, func(tx pgx.Tx) error {
				var have int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = ANY($1::text[]::regclass[]) AND tgname = ANY($2)`,
					mv.tableIdents(), []string{unquote(nn), unquote(on)}).Scan(&have); err != nil {
					return err
				}
				if have == 2*len(mv.tables) {
					return nil
				}
				if err := mv.lockForDDL(ctx, tx, "SHARE ROW EXCLUSIVE"); err != nil {
					return err
				}
				stmts := []string{
					fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s MINVALUE 0 MAXVALUE 1 START 0", flag),
					fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT last_value FROM %s) = 1 THEN
		RAISE EXCEPTION 'cellgate: slots %% are moving to another cell; retry shortly', TG_ARGV[0] USING ERRCODE = '55000';
	END IF;
	IF TG_OP = 'DELETE' THEN
		RETURN OLD;
	END IF;
	RETURN NEW;
END $$`, fn, flag),
				}
				when := "current_setting('cellgate.slot_move', true) IS DISTINCT FROM 'on'"
				arg := fmt.Sprintf("'%d-%d'", lo, hi)
				for _, t := range mv.tables {
					stmts = append(stmts,
						fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW WHEN (NEW.slot BETWEEN %d AND %d AND %s) EXECUTE FUNCTION %s(%s)", nn, t.ident, lo, hi, when, fn, arg),
						fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE UPDATE OR DELETE ON %s FOR EACH ROW WHEN (OLD.slot BETWEEN %d AND %d AND %s) EXECUTE FUNCTION %s(%s)", on, t.ident, lo, hi, when, fn, arg))
				}
				for _, stmt := range stmts {
					if _, err := tx.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("slotmove: install fence on source %s: %w", sc.name, err)
		}
	}
	return nil
}

// fenceWaitPoll is how often activateFence looks whether the writers it
// waits for have ended.
const fenceWaitPoll = 2 * time.Millisecond

// activateFence raises the fence's flag on every source shard, then waits
// until the transactions holding a write lock on a moved table at that
// moment have ended (see above), at most ConfirmTimeout per shard.
func (mv *mover) activateFence(ctx context.Context) error {
	flag, _, _, _ := mv.fenceNames()
	tables := mv.tableIdents()
	const writers = `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE locktype = 'relation' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND relation = ANY($1::text[]::regclass[]) AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()`
	// Raise every shard's flag first, then wait: the waits overlap.
	waitFor := make([][]string, len(mv.source))
	for i, sc := range mv.source {
		if _, err := sc.conn.Exec(ctx, fmt.Sprintf("SELECT setval('%s', 1)", strings.ReplaceAll(flag, "'", "''"))); err != nil {
			return fmt.Errorf("slotmove: raise fence on source %s: %w", sc.name, err)
		}
		if err := sc.conn.QueryRow(ctx, writers, tables).Scan(&waitFor[i]); err != nil {
			return fmt.Errorf("slotmove: raise fence on source %s: %w", sc.name, err)
		}
	}
	for i, sc := range mv.source {
		deadline := time.Now().Add(mv.cfg.ConfirmTimeout)
		for len(waitFor[i]) > 0 {
			if err := sc.conn.QueryRow(ctx, writers+" AND virtualtransaction = ANY($2)", tables, waitFor[i]).Scan(&waitFor[i]); err != nil {
				return fmt.Errorf("slotmove: raise fence on source %s: %w", sc.name, err)
			}
			if len(waitFor[i]) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("slotmove: fence on source %s: transactions %s still write to the moved tables after %s; they may have written to the range before the fence",
					sc.name, strings.Join(waitFor[i], ", "), mv.cfg.ConfirmTimeout)
			}
			if err := mv.cfg.Sleep(ctx, fenceWaitPoll); err != nil {
				return err
			}
		}
	}
	return nil
}

// tableIdents are the moved tables' quoted names, for regclass casts.
func (mv *mover) tableIdents() []string {
	out := make([]string, len(mv.tables))
	for i, t := range mv.tables {
		out[i] = t.ident
	}
	return out
}

// unquote undoes pgx.Identifier.Sanitize of one plain name.
func unquote(ident string) string {
	return strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(ident, `"`), `"`), `""`, `"`)
}

// unfence drops what installFence created.
func (mv *mover) unfence(ctx context.Context) error {
	flag, fn, nn, on := mv.fenceNames()
	for _, sc := range mv.source {
		err := retryLocks(ctx, func() error {
			return pgx.BeginFunc(ctx, sc.conn, func(tx pgx.Tx) error {
				if err := mv.lockForDDL(ctx, tx, "ACCESS EXCLUSIVE"); err != nil {
					return err
				}
				var stmts []string
				for _, t := range mv.tables {
					for _, name := range []string{nn, on} {
						stmts = append(stmts, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", name, t.ident))
					}
				}
				stmts = append(stmts, "DROP FUNCTION IF EXISTS "+fn+"()", "DROP SEQUENCE IF EXISTS "+flag)
				for _, stmt := range stmts {
					if _, err := tx.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("slotmove: drop fence on source %s: %w", sc.name, err)
		}
	}
	return nil
}

// lockTimeout is below PostgreSQL's default deadlock_timeout (1s): when a
// lock wait of the mover is part of a deadlock with the app's
// transactions, the mover gives up first and retries, instead of the
// deadlock detector aborting an app request.
const lockTimeout = "400ms"

// lockForDDL takes the tables' locks up front, children first. An app
// transaction that writes a child row then locks its parent (a foreign key
// check) can finish while the mover waits for the child table, so the two
// never wait on each other in a cycle.
func (mv *mover) lockForDDL(ctx context.Context, tx pgx.Tx, mode string) error {
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
		return err
	}
	for i := len(mv.tables) - 1; i >= 0; i-- {
		if _, err := tx.Exec(ctx, fmt.Sprintf("LOCK TABLE %s IN %s MODE", mv.tables[i].ident, mode)); err != nil {
			return err
		}
	}
	return nil
}

// retryLocks runs fn again when it lost a lock wait or a deadlock: DDL
// and LOCK TABLE queue behind busy writers, and giving up briefly beats
// blocking them.
func retryLocks(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 50 {
		if err = fn(); err == nil {
			return nil
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "55P03" && pe.Code != "40P01") { // lock_not_available, deadlock_detected
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(attempt+1, 10)) * 50 * time.Millisecond):
		}
	}
	return err
}
