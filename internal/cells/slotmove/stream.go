package slotmove

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The range's changes reach the target through PostgreSQL logical
// replication. Each source shard gets, for the move:
//
//   - a publication of the tenant tables with the row filter
//     `WHERE (slot BETWEEN lo AND hi)`, so the server decodes and sends
//     only the range's changes (a tool filtering a whole-table stream
//     would receive every tenant's writes);
//   - a logical replication slot (pgoutput) created with EXPORT_SNAPSHOT:
//     the initial copy reads that snapshot, so it holds exactly the rows
//     committed before the slot's consistent point, and the slot streams
//     exactly the changes committed after it. Nothing is missed or seen
//     twice, however busy the range is during the copy.
//
// The tool applies the stream itself (inserts and updates as upserts on
// the primary key, deletes by primary key, one target transaction per
// source transaction and target shard) instead of a subscription on the
// target: it needs to know what changed (to verify only that inside the
// freeze), where the stream is (a marker it emits after the fence), and
// to route each row to its target shard by slot.
//
// Applying is idempotent, and a position is confirmed to the server only
// once its transactions are committed on the target, so a stream restarted
// after a crash re-sends at most what was applied but not yet confirmed.

// streamSenderTimeout is the replication connections' wal_sender_timeout
// (replConn).
const streamSenderTimeout = "10min"

// markerPrefix names the tool's logical decoding messages.
const markerMessagePrefix = "cellgate_slotmove"

// pubName is the move's publication on every source shard.
func (mv *mover) pubName() string {
	return fmt.Sprintf("cellgate_move_%d_%d", mv.cfg.Range.Lo, mv.cfg.Range.Hi)
}

// slotName is the move's replication slot on source shard i. Slots are
// per cluster, so the shard index keeps two shards of one server apart.
func (mv *mover) slotName(i int) string {
	return fmt.Sprintf("cellgate_move_%d_%d_%d", mv.cfg.Range.Lo, mv.cfg.Range.Hi, i)
}

// SlotPrefix starts the name of every replication slot a move creates
// (cellgate_move_<lo>_<hi>_<shard>); Status lists them.
const SlotPrefix = "cellgate_move_"

// preflight fails early, in one line naming the fix, when a source shard
// cannot stream the range: wal_level below logical, or a table whose
// replica identity does not cover slot (PostgreSQL would then refuse the
// app's UPDATEs and DELETEs on it once the filtered publication exists);
// or when a target's identity sequence caches values (identity.go).
func (mv *mover) preflight(ctx context.Context) error {
	for _, sc := range mv.source {
		if err := checkReplication(ctx, sc.name, sc.conn, mv.tables); err != nil {
			return err
		}
	}
	return mv.checkIdentityCache(ctx)
}

// CheckShard checks that a shard can be the source of an online move of
// tables: wal_level = logical, and every table present with a primary key
// and a replica identity covering slot. The error is one line naming the
// shard or table and the fix (server check -databases and slotmove check
// use it before anything is moved).
func CheckShard(ctx context.Context, sh Shard, tables []string) error {
	c, err := pgx.Connect(ctx, sh.DSN)
	if err != nil {
		return fmt.Errorf("slotmove: shard %s: %w", sh.Name, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	infos := make([]tableInfo, 0, len(tables))
	for _, t := range tables {
		ti, err := describe(ctx, c, t)
		if err != nil {
			return fmt.Errorf("slotmove: shard %s: %w", sh.Name, err)
		}
		infos = append(infos, ti)
	}
	return checkReplication(ctx, sh.Name, c, infos)
}

// checkReplication is the check of CheckShard on an open connection.
func checkReplication(ctx context.Context, shard string, conn *pgx.Conn, tables []tableInfo) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("slotmove: source shard %s: %w", shard, err)
	}
	if level != "logical" {
		return fmt.Errorf("slotmove: source shard %s has wal_level = %s; online moves need wal_level = logical (set it in postgresql.conf and restart the server)", shard, level)
	}
	for _, t := range tables {
		var ident string
		var covered bool
		err := conn.QueryRow(ctx, `
			SELECT c.relreplident::text, coalesce((
				SELECT bool_or(a.attname = 'slot')
				FROM pg_index i
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY((i.indkey::int2[])[0:i.indnkeyatts-1])
				WHERE i.indrelid = c.oid AND (i.indisreplident OR (c.relreplident = 'd' AND i.indisprimary))), false)
			FROM pg_class c WHERE c.oid = $1::regclass`, t.ident).Scan(&ident, &covered)
		if err != nil {
			return fmt.Errorf("slotmove: replica identity of %s on source shard %s: %w", t.name, shard, err)
		}
		if ident == "f" || ((ident == "i" || ident == "d") && covered) {
			continue
		}
		idx := pgx.Identifier{t.name + "_replica_identity"}.Sanitize()
		cols := make([]string, 0, len(t.pk)+1)
		for _, c := range t.pk {
			cols = append(cols, pgx.Identifier{c}.Sanitize())
		}
		cols = append(cols, "slot")
		return fmt.Errorf("slotmove: table %s on source shard %s: its replica identity does not cover slot, which the move's row filter needs for UPDATE and DELETE; fix: CREATE UNIQUE INDEX %s ON %s (%s); ALTER TABLE %s REPLICA IDENTITY USING INDEX %s",
			t.name, shard, idx, t.ident, strings.Join(cols, ", "), t.ident, idx)
	}
	return nil
}

// stream is the replication connection of one source shard.
type stream struct {
	src     int
	slot    string
	conn    *pgconn.PgConn
	rels    map[uint32]*relInfo
	inTx    bool
	applied pglogrepl.LSN // everything up to here is committed on the target
	// Changes are sent to the target in batches (one round trip and one
	// implicit transaction per target shard) of whole source
	// transactions; pending is the position the batches reach.
	batches  map[int]*pgconn.Batch
	batchN   int
	batchAge time.Time
	pending  pglogrepl.LSN
	walEnd   pglogrepl.LSN // the server's position, from its last message
	markers  map[string]bool
	status   time.Time // last status update sent
	// txCommit is the source commit time of the transaction being read,
	// batchCommit that of the oldest transaction in the batches (zero when
	// they are empty), and clockOffset the server's clock minus ours (from
	// its last message): a flush's lag in time is how long after its
	// oldest transaction committed at the source it committed at the
	// target, on the source's clock.
	txCommit, batchCommit time.Time
	clockOffset           time.Duration
}

// relInfo maps a relation of the stream onto a moved table.
type relInfo struct {
	t       *tableInfo
	cols    []string // column names, in the stream's order
	slotCol int
	pkCols  []int // indexes into cols of the primary key's columns
	// identCols are the indexes into cols of the table's identity columns.
	identCols []int
	// upsert and del are the statements that apply a change (del: by
	// primary key).
	upsert, del string
}

// createReplication creates the publication and the replication slot of
// source shard i, leaving the replication connection open (and idle: the
// exported snapshot lives only until it runs another command). It returns
// the snapshot's name.
func (mv *mover) createReplication(ctx context.Context, i int) (string, error) {
	sc := mv.source[i]
	filter := fmt.Sprintf("WHERE (slot BETWEEN %d AND %d)", mv.cfg.Range.Lo, mv.cfg.Range.Hi)
	parts := make([]string, len(mv.tables))
	for k, t := range mv.tables {
		parts[k] = t.ident + " " + filter
	}
	pub := pgx.Identifier{mv.pubName()}.Sanitize()
	if _, err := sc.conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pub); err != nil {
		return "", fmt.Errorf("slotmove: publication on source %s: %w", sc.name, err)
	}
	if _, err := sc.conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete')", pub, strings.Join(parts, ", "))); err != nil {
		return "", fmt.Errorf("slotmove: publication on source %s: %w", sc.name, err)
	}
	conn, err := mv.replConn(ctx, i)
	if err != nil {
		return "", err
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, mv.slotName(i), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return "", fmt.Errorf("slotmove: replication slot %s on source %s: %w", mv.slotName(i), sc.name, err)
	}
	lsn, _ := pglogrepl.ParseLSN(res.ConsistentPoint)
	mv.streams[i] = &stream{src: i, slot: mv.slotName(i), conn: conn, applied: lsn, walEnd: lsn}
	mv.log.Info("replication slot created", "shard", sc.name, "slot", res.SlotName, "consistent_point", res.ConsistentPoint)
	return res.SnapshotName, nil
}

// replConn opens a replication connection to source shard i.
func (mv *mover) replConn(ctx context.Context, i int) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(mv.cfg.Source[i].DSN)
	if err != nil {
		return nil, fmt.Errorf("slotmove: shard %s: %w", mv.cfg.Source[i].Name, err)
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = "cellgate-slotmove-stream"
	// The stream waits while the tool verifies, and one verify statement
	// on a busy server can outlast the default 60 s without a status
	// update: the server would end the stream. A killed tool's
	// connection still ends its walsender at once (the socket closes).
	pc.RuntimeParams["wal_sender_timeout"] = streamSenderTimeout
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("slotmove: replication connection to source %s: %w", mv.cfg.Source[i].Name, err)
	}
	return conn, nil
}

// startStreams starts (or, after a crash, resumes) streaming on every
// source shard that holds part of the range, from its slot's confirmed
// position.
func (mv *mover) startStreams(ctx context.Context) error {
	for i := range mv.source {
		if !mv.involved[i] {
			continue
		}
		s := mv.streams[i]
		if s == nil {
			conn, err := mv.replConn(ctx, i)
			if err != nil {
				return err
			}
			s = &stream{src: i, slot: mv.slotName(i), conn: conn}
			mv.streams[i] = s
		}
		s.rels = map[uint32]*relInfo{}
		s.markers = map[string]bool{}
		s.batches = map[int]*pgconn.Batch{}
		s.batchN = 0
		s.batchCommit = time.Time{}
		s.pending = s.applied
		err := pglogrepl.StartReplication(ctx, s.conn, s.slot, 0, pglogrepl.StartReplicationOptions{
			Mode: pglogrepl.LogicalReplication,
			PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", mv.pubName()),
				"messages 'true'"},
		})
		if err != nil {
			return fmt.Errorf("slotmove: start streaming slot %s on source %s: %w", s.slot, mv.source[i].name, err)
		}
	}
	return nil
}

// closeStreams closes the replication connections (the slots stay).
func (mv *mover) closeStreams() {
	for i, s := range mv.streams {
		if s != nil {
			_ = s.conn.Close(context.Background())
			mv.streams[i] = nil
		}
	}
}

// dropReplication removes the move's slots and publications from every
// source shard, whether this run or an earlier, crashed one made them.
func (mv *mover) dropReplication(ctx context.Context) error {
	mv.closeStreams()
	for i, sc := range mv.source {
		if err := dropSlot(ctx, sc, mv.slotName(i)); err != nil {
			return err
		}
		if _, err := sc.conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{mv.pubName()}.Sanitize()); err != nil {
			return fmt.Errorf("slotmove: drop publication on source %s: %w", sc.name, err)
		}
	}
	return nil
}

// dropSlot drops a replication slot if it exists. The walsender of a
// killed run may hold it for a moment after its client died, so an
// active slot is retried for a while.
func dropSlot(ctx context.Context, sc *shardConn, name string) error {
	var err error
	for range 100 {
		_, err = sc.conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" { // object_in_use
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("slotmove: drop replication slot %s on source %s: %w", name, sc.name, err)
	}
	return nil
}

// hasReplication reports whether every source shard that holds part of
// the range has the move's slot.
func (mv *mover) hasReplication(ctx context.Context) (bool, error) {
	for i, sc := range mv.source {
		if !mv.involved[i] {
			continue
		}
		var n int
		if err := sc.conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", mv.slotName(i)).Scan(&n); err != nil {
			return false, fmt.Errorf("slotmove: replication slots on source %s: %w", sc.name, err)
		}
		if n == 0 {
			return false, nil
		}
	}
	return true, nil
}

// catchUp commits a marker on every source shard and applies each stream
// until it has delivered the marker's transaction: then everything
// committed at the source before catchUp was called is on the target
// (logical decoding sends transactions in commit order). The markers are
// all written first, so the shards' round trips overlap. It returns the
// longest marker round trip and the largest lag in bytes seen at the
// emission.
func (mv *mover) catchUp(ctx context.Context) (time.Duration, int64, error) {
	var worst time.Duration
	var lagBytes int64
	start := time.Now()
	tokens := make([]string, len(mv.source))
	for i, sc := range mv.source {
		if !mv.involved[i] {
			continue
		}
		s := mv.streams[i]
		tokens[i] = fmt.Sprintf("%d-%d", time.Now().UnixNano(), i)
		// A transactional marker whose commit is flushed at once: the
		// walsender sends only flushed WAL, and PostgreSQL 15 does not
		// flush a non-transactional message by itself.
		var lsn pglogrepl.LSN
		err := pgx.BeginFunc(ctx, sc.conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", markerMessagePrefix, tokens[i]).Scan(&lsn)
		})
		if err != nil {
			return 0, 0, fmt.Errorf("slotmove: marker on source %s: %w", sc.name, err)
		}
		if lag := int64(lsn) - int64(s.applied); lag > lagBytes {
			lagBytes = lag
		}
	}
	for i := range mv.source {
		if !mv.involved[i] {
			continue
		}
		s := mv.streams[i]
		if err := mv.pump(ctx, s, func() bool { return s.markers[tokens[i]] }); err != nil {
			return 0, 0, err
		}
		worst = max(worst, time.Since(start))
	}
	if lagBytes > mv.peakLag {
		mv.peakLag = lagBytes
	}
	// The marker's round trip is the stream's lag in time: how long a
	// change committed at the source takes to be applied at the target.
	mv.peakLagTime = max(mv.peakLagTime, worst)
	return worst, lagBytes, nil
}

// pump applies the stream until done() holds between two source
// transactions.
func (mv *mover) pump(ctx context.Context, s *stream, done func() bool) error {
	lastLog := time.Now()
	for {
		if !s.inTx && done() {
			if err := mv.flush(ctx, s); err != nil {
				return err
			}
			return mv.sendStatus(ctx, s)
		}
		// The other streams wait meanwhile; answering their servers keeps
		// wal_sender_timeout from ending them.
		if err := mv.keepStreamsAlive(ctx); err != nil {
			return err
		}
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			mv.log.Info("streaming", "shard", mv.source[s.src].name, "changes_applied", mv.streamed,
				"lag_bytes", max(int64(s.walEnd)-int64(s.applied), 0))
		}
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				if !s.inTx {
					if err := mv.flush(ctx, s); err != nil {
						return err
					}
				}
				continue
			}
			return fmt.Errorf("slotmove: stream of source %s: %w", mv.source[s.src].name, err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("slotmove: stream of source %s: %w", mv.source[s.src].name, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			if err := mv.handle(ctx, s, m.Data); err != nil {
				return err
			}
		}
	}
}

// sendStatus confirms the applied position, so the server may recycle the
// WAL before it.
func (mv *mover) sendStatus(ctx context.Context, s *stream) error {
	s.status = time.Now()
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: s.applied}); err != nil {
		return fmt.Errorf("slotmove: stream of source %s: status: %w", mv.source[s.src].name, err)
	}
	return nil
}

// keepStreamsAlive answers the servers while the tool is busy elsewhere
// (a long verify), so wal_sender_timeout does not end the streams.
func (mv *mover) keepStreamsAlive(ctx context.Context) error {
	for _, s := range mv.streams {
		if s != nil && time.Since(s.status) > time.Second {
			if err := mv.sendStatus(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (mv *mover) handle(ctx context.Context, s *stream, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	name := mv.source[s.src].name
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("slotmove: stream of source %s: %w", name, err)
		}
		s.walEnd = max(s.walEnd, pkm.ServerWALEnd)
		s.clockOffset = time.Until(pkm.ServerTime)
		if !s.inTx {
			// Everything before the server's position has been sent:
			// confirming it once applied lets the slot release WAL that
			// only held other tenants' changes.
			s.pending = max(s.pending, pkm.ServerWALEnd)
			if s.batchN == 0 {
				s.applied = s.pending
			}
		}
		if pkm.ReplyRequested {
			return mv.sendStatus(ctx, s)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("slotmove: stream of source %s: %w", name, err)
		}
		s.walEnd = max(s.walEnd, xld.ServerWALEnd)
		s.clockOffset = time.Until(xld.ServerTime)
		if int64(s.walEnd)-int64(s.applied) > mv.peakLag {
			mv.peakLag = int64(s.walEnd) - int64(s.applied)
		}
		msg, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("slotmove: stream of source %s: %w", name, err)
		}
		return mv.apply(ctx, s, msg, xld.WALStart)
	}
	return nil
}

// apply applies one pgoutput message.
func (mv *mover) apply(ctx context.Context, s *stream, msg pglogrepl.Message, at pglogrepl.LSN) error {
	name := mv.source[s.src].name
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		ri, err := mv.relation(m)
		if err != nil {
			return fmt.Errorf("slotmove: stream of source %s: %w", name, err)
		}
		s.rels[m.RelationID] = ri
	case *pglogrepl.BeginMessage:
		s.inTx = true
		s.txCommit = m.CommitTime
	case *pglogrepl.CommitMessage:
		s.inTx = false
		s.pending = max(s.pending, m.TransactionEndLSN)
		if s.batchN > 0 && s.batchCommit.IsZero() {
			s.batchCommit = s.txCommit
		}
		if s.batchN == 0 {
			s.applied = s.pending
		} else if s.batchN >= 2000 || time.Since(s.batchAge) > 100*time.Millisecond {
			return mv.flush(ctx, s)
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix == markerMessagePrefix {
			s.markers[string(m.Content)] = true
			if !s.inTx {
				s.pending = max(s.pending, at)
			}
		}
	case *pglogrepl.InsertMessage:
		return mv.applyRow(ctx, s, m.RelationID, m.Tuple, nil, false)
	case *pglogrepl.UpdateMessage:
		var old *pglogrepl.TupleData
		if m.OldTupleType == pglogrepl.UpdateMessageTupleTypeKey || m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld {
			old = m.OldTuple
		}
		return mv.applyRow(ctx, s, m.RelationID, m.NewTuple, old, false)
	case *pglogrepl.DeleteMessage:
		return mv.applyRow(ctx, s, m.RelationID, nil, m.OldTuple, true)
	case *pglogrepl.TruncateMessage:
		return fmt.Errorf("slotmove: stream of source %s: a moved table was truncated during the move; abort the move and start it again", name)
	}
	return nil
}

// relation maps a Relation message onto its table.
func (mv *mover) relation(m *pglogrepl.RelationMessage) (*relInfo, error) {
	var t *tableInfo
	for i := range mv.tables {
		if mv.tables[i].name == m.RelationName {
			t = &mv.tables[i]
		}
	}
	if t == nil {
		return nil, fmt.Errorf("unexpected relation %s.%s in the stream", m.Namespace, m.RelationName)
	}
	ri := &relInfo{t: t, slotCol: -1}
	idx := map[string]int{}
	for i, c := range m.Columns {
		ri.cols = append(ri.cols, c.Name)
		idx[c.Name] = i
	}
	if i, ok := idx["slot"]; ok {
		ri.slotCol = i
	} else {
		return nil, fmt.Errorf("table %s streams no slot column", t.name)
	}
	for _, k := range t.pk {
		i, ok := idx[k]
		if !ok {
			return nil, fmt.Errorf("table %s streams no primary key column %s", t.name, k)
		}
		ri.pkCols = append(ri.pkCols, i)
	}
	for _, c := range t.identity {
		if i, ok := idx[c]; ok {
			ri.identCols = append(ri.identCols, i)
		}
	}
	quoted := make([]string, len(ri.cols))
	params := make([]string, len(ri.cols))
	var sets []string
	for i, c := range ri.cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
		params[i] = fmt.Sprintf("$%d", i+1)
		if !contains(t.pk, c) {
			sets = append(sets, quoted[i]+" = EXCLUDED."+quoted[i])
		}
	}
	conflict := "DO NOTHING"
	if len(sets) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
	}
	ri.del = t.deleteByKey()
	ri.upsert = fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE VALUES (%s) ON CONFLICT (%s) %s",
		t.ident, strings.Join(quoted, ", "), strings.Join(params, ", "), t.pkList(), conflict)
	return ri, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// applyRow writes one change to the row's target shard: newTup is upserted
// (with TOAST-unchanged columns left as they are), a delete removes old's
// key, and an update that changed the key removes the old key first.
func (mv *mover) applyRow(ctx context.Context, s *stream, rel uint32, newTup, old *pglogrepl.TupleData, del bool) error {
	ri := s.rels[rel]
	if ri == nil {
		return fmt.Errorf("slotmove: stream of source %s: change of unknown relation %d", mv.source[s.src].name, rel)
	}
	keyOf := func(tup *pglogrepl.TupleData) ([][]byte, int, error) {
		if tup == nil || len(tup.Columns) != len(ri.cols) {
			return nil, 0, fmt.Errorf("slotmove: table %s: a change without its key columns", ri.t.name)
		}
		key := make([][]byte, len(ri.pkCols))
		for i, c := range ri.pkCols {
			col := tup.Columns[c]
			if col.DataType != pglogrepl.TupleDataTypeText {
				return nil, 0, fmt.Errorf("slotmove: table %s: primary key column %s not sent", ri.t.name, ri.cols[c])
			}
			key[i] = col.Data
		}
		sc := tup.Columns[ri.slotCol]
		var slot int
		if sc.DataType != pglogrepl.TupleDataTypeText {
			return nil, 0, fmt.Errorf("slotmove: table %s: slot not sent", ri.t.name)
		}
		if _, err := fmt.Sscan(string(sc.Data), &slot); err != nil {
			return nil, 0, fmt.Errorf("slotmove: table %s: slot %q: %w", ri.t.name, sc.Data, err)
		}
		return key, slot, nil
	}
	var newKey [][]byte
	var newSlot int
	if newTup != nil {
		var err error
		if newKey, newSlot, err = keyOf(newTup); err != nil {
			return err
		}
	}
	if old != nil {
		oldKey, oldSlot, err := keyOf(old)
		if err != nil {
			return err
		}
		if del || !sameKey(oldKey, newKey) {
			if err := mv.exec(ctx, s, oldSlot, ri.del, oldKey, true); err != nil {
				return err
			}
			mv.markDirty(ri.t, oldSlot, oldKey)
		}
	}
	if del {
		mv.streamed++
		return nil
	}
	vals := make([][]byte, len(newTup.Columns))
	unchanged := false
	for i, c := range newTup.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			vals[i] = c.Data
		case pglogrepl.TupleDataTypeToast:
			unchanged = true
		}
	}
	if unchanged {
		// An update that left a large (TOASTed) value as it was does not
		// send it: update the sent columns only.
		var sets []string
		var args [][]byte
		for i, c := range newTup.Columns {
			if c.DataType == pglogrepl.TupleDataTypeToast || contains(ri.t.pk, ri.cols[i]) {
				continue
			}
			args = append(args, vals[i])
			sets = append(sets, fmt.Sprintf("%s = $%d", pgx.Identifier{ri.cols[i]}.Sanitize(), len(args)))
		}
		where := make([]string, len(ri.t.pk))
		for i, k := range ri.t.pk {
			args = append(args, newKey[i])
			where[i] = fmt.Sprintf("%s = $%d", pgx.Identifier{k}.Sanitize(), len(args))
		}
		q := fmt.Sprintf("UPDATE %s SET %s WHERE %s", ri.t.ident, strings.Join(sets, ", "), strings.Join(where, " AND "))
		if err := mv.exec(ctx, s, newSlot, q, args, false); err != nil {
			return err
		}
	} else if err := mv.exec(ctx, s, newSlot, ri.upsert, vals, true); err != nil {
		return err
	}
	mv.noteIdentity(mv.dstMap.Owner(newSlot), ri, vals)
	mv.markDirty(ri.t, newSlot, newKey)
	mv.streamed++
	return nil
}

func sameKey(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

// exec queues one statement with text parameters (their types inferred
// by the server from the columns) for the slot's target shard. The
// statements every change uses (a table's upsert and delete) are prepared
// once per target shard: parsing and planning each change again would
// cost the target more than applying it.
func (mv *mover) exec(ctx context.Context, s *stream, slot int, q string, args [][]byte, prepare bool) error {
	d := mv.dstMap.Owner(slot)
	name := ""
	if prepare {
		var err error
		if name, err = mv.prepared(ctx, d, q); err != nil {
			return err
		}
	}
	b := s.batches[d]
	if b == nil {
		b = &pgconn.Batch{}
		s.batches[d] = b
	}
	if s.batchN == 0 {
		s.batchAge = time.Now()
	}
	if name != "" {
		b.ExecPrepared(name, args, nil, nil)
	} else {
		b.ExecParams(q, args, nil, nil, nil)
	}
	s.batchN++
	return nil
}

// prepared returns the name of q prepared on target shard d, preparing it
// the first time. Only called between batches, while the connection is
// idle.
func (mv *mover) prepared(ctx context.Context, d int, q string) (string, error) {
	if name, ok := mv.stmts[d][q]; ok {
		return name, nil
	}
	if mv.stmts[d] == nil {
		mv.stmts[d] = map[string]string{}
	}
	name := fmt.Sprintf("cellgate_move_%d", len(mv.stmts[d]))
	if _, err := mv.target[d].conn.PgConn().Prepare(ctx, name, q, nil); err != nil {
		return "", fmt.Errorf("slotmove: prepare on target %s: %w", mv.target[d].name, err)
	}
	mv.stmts[d][q] = name
	return name, nil
}

// flush sends the queued changes, each target shard's in one implicit
// transaction, and then counts their position as applied.
func (mv *mover) flush(ctx context.Context, s *stream) error {
	for d, b := range s.batches {
		results, err := mv.target[d].conn.PgConn().ExecBatch(ctx, b).ReadAll()
		if err == nil {
			for _, r := range results {
				if r.Err != nil {
					err = r.Err
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("slotmove: apply on target %s: %w", mv.target[d].name, err)
		}
		delete(s.batches, d)
	}
	s.batchN = 0
	s.applied = max(s.applied, s.pending)
	if !s.batchCommit.IsZero() {
		// Changes committed at the source while the tool copied or
		// compared wait for it: this is the lag they saw.
		mv.peakLagTime = max(mv.peakLagTime, time.Now().Add(s.clockOffset).Sub(s.batchCommit))
		s.batchCommit = time.Time{}
	}
	return nil
}
