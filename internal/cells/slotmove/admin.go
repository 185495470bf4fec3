package slotmove

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/jackc/pgx/v5"
)

// MoveSlot is a replication slot a move created on a shard. A slot nobody
// reads holds back WAL on its server until it is dropped, so an
// abandoned one fills the disk: Status lists them, Abort (or the move run
// again) drops them.
type MoveSlot struct {
	// Shard names the shard whose database holds the slot.
	Shard string
	// Slot is the slot's name (SlotPrefix + range + source shard index).
	Slot string
	// Active says a walsender streams it now (a move is running).
	Active bool
	// RetainedBytes is the WAL the slot holds back on its server.
	RetainedBytes int64
}

// Status lists the moves' replication slots in the shards' databases.
func Status(ctx context.Context, shards []Shard) ([]MoveSlot, error) {
	var out []MoveSlot
	for _, sh := range shards {
		c, err := pgx.Connect(ctx, sh.DSN)
		if err != nil {
			return out, fmt.Errorf("slotmove: shard %s: %w", sh.Name, err)
		}
		rows, err := c.Query(ctx, `
			SELECT slot_name::text, active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
			FROM pg_replication_slots
			WHERE database = current_database() AND starts_with(slot_name::text, $1)
			ORDER BY slot_name`, SlotPrefix)
		if err == nil {
			for rows.Next() {
				s := MoveSlot{Shard: sh.Name}
				if err = rows.Scan(&s.Slot, &s.Active, &s.RetainedBytes); err != nil {
					break
				}
				out = append(out, s)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		_ = c.Close(ctx)
		if err != nil {
			return out, fmt.Errorf("slotmove: replication slots on shard %s: %w", sh.Name, err)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, nil
}

// Abort gives up the move cfg describes, as long as the map still gives
// the range to the source: it drops the move's replication slots and
// publications, the fence, the frozen mark in the map, the target's
// partial copy of the range and the state file. A switched move cannot be
// aborted (the target has taken writes): run it again to finish it.
func Abort(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.logger()
	mv, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer mv.close()
	side := newMapSide(mv)
	defer side.close()
	owner, frozen, err := side.load(ctx)
	if err != nil {
		return err
	}
	if owner == cfg.To {
		return fmt.Errorf("slotmove: the map already gives slots %s to %s, so the move cannot be aborted; run it again to finish it", cfg.Range, cfg.To)
	}
	if err := mv.dropReplication(ctx); err != nil {
		return err
	}
	if err := mv.unfence(ctx); err != nil {
		return err
	}
	if frozen {
		if err := side.unfreeze(ctx); err != nil {
			return err
		}
	}
	n, err := mv.deleteRange(ctx, mv.target, "target")
	if err != nil {
		return err
	}
	if err := os.Remove(cfg.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("slotmove: state: %w", err)
	}
	log.Info("move aborted: replication slots, publications and fence dropped, range unfrozen at the source", "target_rows_deleted", fmt.Sprint(n))
	return nil
}
