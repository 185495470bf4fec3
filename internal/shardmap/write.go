package shardmap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/slots"
)

// DB is the control database: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoRecord is returned when the control database holds no shard map
// yet: no process of the cell has started since the migrations ran (or
// Seed was never called).
var ErrNoRecord = errors.New("shard map: the control database holds no shard map yet; start the cell once (its first process writes the map of its config) or call Seed")

// updatedBy names the writer in the record: the session's
// application_name, or the database user when it is unset.
const updatedBy = `coalesce(nullif(current_setting('application_name'), ''), current_user)`

// Read returns the record in force and its version, or ErrNoRecord. The
// record is decoded strictly but not checked against any spec.
func Read(ctx context.Context, db DB) (Record, int64, error) {
	var (
		version int64
		raw     []byte
	)
	err := db.QueryRow(ctx, `SELECT version, map FROM cellgate_shard_map`).Scan(&version, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, 0, ErrNoRecord
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("shard map: %w", err)
	}
	rec, err := decode(raw)
	if err != nil {
		return Record{}, version, fmt.Errorf("shard map version %d: %w", version, err)
	}
	return rec, version, nil
}

// decode parses a stored record strictly: unknown fields are an error.
func decode(raw []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return Record{}, fmt.Errorf("decode: %w", err)
	}
	return rec, nil
}

// Seed writes rec as version 1 when the control database holds no shard
// map, and does nothing when it holds one (the record wins over the
// config from then on). It returns the version in force and whether it
// wrote it. rec must check out (Validate).
func Seed(ctx context.Context, db DB, rec Record) (version int64, created bool, err error) {
	norm, err := rec.Normalize()
	if err != nil {
		return 0, false, err
	}
	raw, err := json.Marshal(norm)
	if err != nil {
		return 0, false, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO cellgate_shard_map (one, version, map, updated_by)
			VALUES (true, 1, $1, `+updatedBy+`) ON CONFLICT (one) DO NOTHING`, raw)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		if created {
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '1')`, Channel); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT version FROM cellgate_shard_map`).Scan(&version)
	})
	if err != nil {
		return 0, false, fmt.Errorf("shard map: seed: %w", err)
	}
	return version, created, nil
}

// Update changes the record in one transaction: it locks the row, hands
// the record to change, checks what change returns, and writes it as the
// next version, notifying every process of the cell. A change that leaves
// the record as it was writes nothing and returns the version in force, so
// every step of a move is safe to repeat. A record that does not check out
// is refused with the error naming the field.
func Update(ctx context.Context, db DB, change func(Record) (Record, error)) (int64, error) {
	var version int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT version, map FROM cellgate_shard_map FOR UPDATE`).Scan(&version, &raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoRecord
		}
		if err != nil {
			return err
		}
		cur, err := decode(raw)
		if err != nil {
			return fmt.Errorf("version %d: %w; fix the record before changing it", version, err)
		}
		if cur, err = cur.Normalize(); err != nil {
			return fmt.Errorf("version %d: %w; fix the record before changing it", version, err)
		}
		next, err := change(cur)
		if err != nil {
			return err
		}
		if next, err = next.Normalize(); err != nil {
			return err
		}
		if n := next.names(); len(n) < len(cur.names()) || !slices.Equal(n[:len(cur.names())], cur.names()) {
			return fmt.Errorf("shards: %q, want %q first: a change may move slots, freeze them and add shards at the end, not remove, rename or reorder shards", n, cur.names())
		}
		out, err := json.Marshal(next)
		if err != nil {
			return err
		}
		old, _ := json.Marshal(cur)
		if bytes.Equal(out, old) {
			return nil
		}
		if err := tx.QueryRow(ctx, `UPDATE cellgate_shard_map SET version = version + 1, map = $1,
			updated_by = `+updatedBy+`, updated_at = now() RETURNING version`, out).Scan(&version); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, strconv.FormatInt(version, 10))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNoRecord) {
			return 0, err
		}
		return 0, fmt.Errorf("shard map: %w", err)
	}
	return version, nil
}

// AddShards appends to the record, with no slots, every shard of names it
// does not list yet, so that ranges can be switched to a shard added to
// database.shards after the record was first written. Every watcher does
// this for its config's shards when it connects.
func AddShards(ctx context.Context, db DB, names []string) (int64, error) {
	return Update(ctx, db, func(r Record) (Record, error) {
		for _, n := range names {
			if !slices.Contains(r.names(), n) {
				r.Shards = append(r.Shards, ShardSlots{Name: n, Slots: []string{}})
			}
		}
		return r, nil
	})
}

// Freeze marks ranges frozen: from the version it returns, every process
// that has applied it answers their tenants 503 with Retry-After: 1 before
// any handler or database work. Confirm with WaitApplied.
func Freeze(ctx context.Context, db DB, ranges []slots.Range) (int64, error) {
	return Update(ctx, db, func(r Record) (Record, error) { return r.WithFrozen(ranges, true) })
}

// Switch gives every slot of ranges to the shard named toShard. The ranges
// must be frozen (Freeze first) and stay frozen: Unfreeze once every
// process has applied the switch (WaitApplied).
func Switch(ctx context.Context, db DB, ranges []slots.Range, toShard string) (int64, error) {
	return Update(ctx, db, func(r Record) (Record, error) { return r.Reassign(ranges, toShard) })
}

// Unfreeze serves ranges again, on the shard the map gives them.
func Unfreeze(ctx context.Context, db DB, ranges []slots.Range) (int64, error) {
	return Update(ctx, db, func(r Record) (Record, error) { return r.WithFrozen(ranges, false) })
}

// Process is one process's row of cellgate_shard_map_applied.
type Process struct {
	// ID names the process (Options.Process: host, pid and a random part
	// by default).
	ID string
	// Version is the map version the process applies.
	Version int64
	// OlderInFlight counts the process's requests that started on a map
	// it has since replaced and have not finished.
	OlderInFlight int64
	// Heartbeat is when it last said so.
	Heartbeat time.Time
}

// DefaultStaleAfter is how old a heartbeat may be for its process to count
// as live: several resync periods (a watcher beats every Options.Resync,
// 1 s by default).
const DefaultStaleAfter = 5 * time.Second

// Applied lists the processes whose heartbeat is younger than staleAfter
// (DefaultStaleAfter when 0), ordered by id.
func Applied(ctx context.Context, db DB, staleAfter time.Duration) ([]Process, error) {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	rows, err := db.Query(ctx, `SELECT process, version, older_in_flight, heartbeat FROM cellgate_shard_map_applied
		WHERE heartbeat > now() - $1::interval ORDER BY process`, staleAfter.String())
	if err != nil {
		return nil, fmt.Errorf("shard map: applied: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Process, error) {
		var p Process
		err := r.Scan(&p.ID, &p.Version, &p.OlderInFlight, &p.Heartbeat)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("shard map: applied: %w", err)
	}
	return out, nil
}

// WaitOptions tune WaitApplied; zero values take the defaults.
type WaitOptions struct {
	// StaleAfter: see Applied (default DefaultStaleAfter).
	StaleAfter time.Duration
	// Poll is the wait between two reads (default 10ms).
	Poll time.Duration
	// Drain also waits until no process has a request in flight that
	// started on a map older than the one it applies: after a Freeze, no
	// request routed by the unfrozen map can still write to the source.
	// A long stream of any tenant holds it back, as it holds back a
	// router's requests_on_older_maps.
	Drain bool
}

// WaitApplied returns once at least one process is live and every live
// process applies version or a later one (and, with o.Drain, has no
// request left from an older map). When ctx ends first, the error names
// the processes still behind and where each stands. A
// process whose heartbeat stopped (down, or cut off from the control
// database) is not waited for: a move must not rely on it for safety (the
// slot-move tool's fence at the source refuses its late writes).
func WaitApplied(ctx context.Context, db DB, version int64, o WaitOptions) error {
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	var (
		seen   bool     // a read succeeded
		live   int      // live processes at the last read
		behind []string // those of them behind version
	)
	for {
		ps, err := Applied(ctx, db, o.StaleAfter)
		switch {
		case err == nil:
			seen, live, behind = true, len(ps), nil
			for _, p := range ps {
				switch {
				case p.Version < version:
					behind = append(behind, fmt.Sprintf("%s at %d", p.ID, p.Version))
				case o.Drain && p.OlderInFlight > 0:
					behind = append(behind, fmt.Sprintf("%s with %d requests on older maps", p.ID, p.OlderInFlight))
				}
			}
			if live > 0 && len(behind) == 0 {
				return nil
			}
		case ctx.Err() == nil:
			return err
		}
		select {
		case <-ctx.Done():
			switch {
			case !seen:
				return fmt.Errorf("shard map: waiting for version %d: %w", version, ctx.Err())
			case live == 0:
				return fmt.Errorf("shard map: waiting for version %d: no live process of the cell reports a version (%w)", version, ctx.Err())
			}
			return fmt.Errorf("shard map: waiting for version %d: %s (%w)", version, strings.Join(behind, ", "), ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}
