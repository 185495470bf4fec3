package slotmove

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/slots"
)

// mapSide is the map a move switches: the router's slot map file for a
// move between cells, the cell's shard map record (internal/shardmap) for
// a move between two shards of one cell. Copy, stream, verify, fence and
// finish are the same for both; only who routes the range, and how the
// tool learns that every reader applies a change, differ.
type mapSide interface {
	// load reads the map in force: the range's single owner (Config.From
	// or Config.To) and whether any of its slots is frozen.
	load(ctx context.Context) (owner string, frozen bool, err error)
	// freeze marks the range frozen; settle then returns once no reader
	// of the map sends the range's tenants to the source any more and no
	// request it sent there earlier is still running.
	freeze(ctx context.Context) error
	settle(ctx context.Context) error
	// restore undoes freeze (the move stopped inside the freeze).
	restore(ctx context.Context) error
	// unfreeze clears the range's frozen mark wherever the map gives it
	// (a run that died inside the freeze, an abort).
	unfreeze(ctx context.Context) error
	// switchOver gives the frozen range to the target and serves it
	// again; confirmSwitched waits until every reader applies that.
	switchOver(ctx context.Context) error
	confirmSwitched(ctx context.Context) error
	// close releases what load opened.
	close()
}

// fileSide is the router's slot map file (Config.MapFile), confirmed by
// the routers' /readyz (Config.Routers) or a Settle sleep.
type fileSide struct {
	mv *mover
	// cur is the map last read or written; orig the bytes restore puts
	// back; frozenRaw what freeze wrote (restore leaves a file someone
	// else changed since).
	cur             cells.SlotMap
	orig, frozenRaw []byte
}

func (f *fileSide) load(context.Context) (string, bool, error) {
	cfg := f.mv.cfg
	raw, err := os.ReadFile(cfg.MapFile)
	if err != nil {
		return "", false, fmt.Errorf("slotmove: %w", err)
	}
	m, r, err := cells.ParseSlotMap(raw)
	if err != nil {
		return "", false, fmt.Errorf("slotmove: %s: %w", cfg.MapFile, err)
	}
	f.cur, f.orig = m, raw
	return rangeState(r, cfg)
}

func (f *fileSide) freeze(context.Context) error {
	fm, err := f.cur.WithFrozen(f.mv.cfg.Range, true)
	if err != nil {
		return err
	}
	f.frozenRaw = fm.Marshal()
	if err := cells.WriteFileAtomic(f.mv.cfg.MapFile, f.frozenRaw, 0o644); err != nil {
		return fmt.Errorf("slotmove: freeze: %w", err)
	}
	f.cur = fm
	return nil
}

func (f *fileSide) settle(ctx context.Context) error {
	if len(f.mv.cfg.Routers) > 0 {
		return f.mv.confirmRouters(ctx, f.cur, true)
	}
	return f.mv.cfg.Sleep(ctx, f.mv.cfg.Settle)
}

func (f *fileSide) restore(context.Context) error {
	// Put routing back exactly as it was, unless someone else has changed
	// the file meanwhile: then leave theirs and say so.
	cur, err := os.ReadFile(f.mv.cfg.MapFile)
	switch {
	case err != nil:
		return err
	case string(cur) != string(f.frozenRaw):
		return fmt.Errorf("slotmove: %s changed during the move; not restoring it", f.mv.cfg.MapFile)
	}
	return cells.WriteFileAtomic(f.mv.cfg.MapFile, f.orig, 0o644)
}

func (f *fileSide) unfreeze(context.Context) error {
	uf, err := f.cur.WithFrozen(f.mv.cfg.Range, false)
	if err != nil {
		return err
	}
	if err := cells.WriteSlotMap(f.mv.cfg.MapFile, uf); err != nil {
		return fmt.Errorf("slotmove: unfreeze: %w", err)
	}
	f.cur, f.orig = uf, uf.Marshal()
	return nil
}

func (f *fileSide) switchOver(context.Context) error {
	cfg := f.mv.cfg
	// Reassigned and unfrozen in one write: a router goes from refusing
	// the range straight to sending it to the target.
	sw, err := f.cur.Reassign(cfg.Range, cfg.From, cfg.To)
	if err == nil {
		sw, err = sw.WithFrozen(cfg.Range, false)
	}
	if err != nil {
		return err
	}
	if err := cells.WriteSlotMap(cfg.MapFile, sw); err != nil {
		return err
	}
	f.cur = sw
	return nil
}

func (f *fileSide) confirmSwitched(ctx context.Context) error {
	if len(f.mv.cfg.Routers) == 0 {
		return nil
	}
	return f.mv.confirmRouters(ctx, f.cur, false)
}

func (f *fileSide) close() {}

// shardSide is the shard map record in the cell's control database
// (Config.Control), confirmed by shardmap.WaitApplied: every live process
// of the cell reports the version it applies, and with Drain that none of
// its requests routed by an older map is left.
type shardSide struct {
	mv      *mover
	conn    *pgx.Conn
	version int64 // the version the last write returned
}

func (s *shardSide) db(ctx context.Context) (*pgx.Conn, error) {
	if s.conn != nil {
		return s.conn, nil
	}
	c, err := pgx.Connect(ctx, s.mv.cfg.Control.DSN)
	if err != nil {
		return nil, fmt.Errorf("slotmove: control database of cell %s: %w", s.mv.cfg.Cell, err)
	}
	s.conn = c
	return c, nil
}

func (s *shardSide) ranges() []slots.Range { return []slots.Range{s.mv.cfg.Range} }

func (s *shardSide) load(ctx context.Context) (string, bool, error) {
	cfg := s.mv.cfg
	db, err := s.db(ctx)
	if err != nil {
		return "", false, err
	}
	rec, _, err := shardmap.Read(ctx, db)
	if err != nil {
		return "", false, fmt.Errorf("slotmove: cell %s: %w", cfg.Cell, err)
	}
	return shardRangeState(rec, cfg)
}

// shardRangeState is rangeState for a shard map record.
func shardRangeState(rec shardmap.Record, cfg Config) (owner string, frozen bool, err error) {
	var names []string
	for _, sh := range rec.Shards {
		names = append(names, sh.Name)
	}
	for _, n := range []string{cfg.From, cfg.To} {
		if !slices.Contains(names, n) {
			return "", false, fmt.Errorf("slotmove: cell %s's shard map has no shard %q (it has %q); deploy the spec that adds it first", cfg.Cell, n, names)
		}
	}
	// Who holds each slot of the range, from the record's specs.
	held := make([]string, cfg.Range.Len())
	for _, sh := range rec.Shards {
		for _, spec := range sh.Slots {
			rg, err := slots.ParseSpec(spec)
			if err != nil {
				return "", false, fmt.Errorf("slotmove: cell %s's shard map: shard %s: %w", cfg.Cell, sh.Name, err)
			}
			for x := max(rg.Lo, cfg.Range.Lo); x <= min(rg.Hi, cfg.Range.Hi); x++ {
				held[x-cfg.Range.Lo] = sh.Name
			}
		}
	}
	for i, o := range held {
		switch {
		case o == "":
			return "", false, fmt.Errorf("slotmove: cell %s's shard map gives slot %d no shard", cfg.Cell, cfg.Range.Lo+i)
		case owner == "":
			owner = o
		case o != owner:
			return "", false, fmt.Errorf("slotmove: slots %s are split between shards %s and %s of cell %s; move ranges that one shard holds", cfg.Range, owner, o, cfg.Cell)
		}
	}
	if owner != cfg.From && owner != cfg.To {
		return "", false, fmt.Errorf("slotmove: slots %s are on shard %s of cell %s, neither %s nor %s", cfg.Range, owner, cfg.Cell, cfg.From, cfg.To)
	}
	for _, spec := range rec.Frozen {
		rg, err := slots.ParseSpec(spec)
		if err != nil {
			return "", false, fmt.Errorf("slotmove: cell %s's shard map: frozen: %w", cfg.Cell, err)
		}
		frozen = frozen || (rg.Lo <= cfg.Range.Hi && cfg.Range.Lo <= rg.Hi)
	}
	return owner, frozen, nil
}

func (s *shardSide) write(ctx context.Context, what string, fn func(context.Context, shardmap.DB, []slots.Range) (int64, error)) error {
	db, err := s.db(ctx)
	if err != nil {
		return err
	}
	v, err := fn(ctx, db, s.ranges())
	if err != nil {
		return fmt.Errorf("slotmove: %s in cell %s's shard map: %w", what, s.mv.cfg.Cell, err)
	}
	s.version = v
	return nil
}

// wait is WaitApplied for the last version written, bounded by
// ConfirmTimeout.
func (s *shardSide) wait(ctx context.Context, drain bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.mv.cfg.ConfirmTimeout)
	defer cancel()
	if err := shardmap.WaitApplied(ctx, s.conn, s.version, shardmap.WaitOptions{Drain: drain}); err != nil {
		return fmt.Errorf("slotmove: cell %s: %w", s.mv.cfg.Cell, err)
	}
	return nil
}

func (s *shardSide) freeze(ctx context.Context) error {
	return s.write(ctx, "freeze", shardmap.Freeze)
}

func (s *shardSide) settle(ctx context.Context) error { return s.wait(ctx, true) }

func (s *shardSide) restore(ctx context.Context) error { return s.unfreeze(ctx) }

func (s *shardSide) unfreeze(ctx context.Context) error {
	return s.write(ctx, "unfreeze", shardmap.Unfreeze)
}

func (s *shardSide) switchOver(ctx context.Context) error {
	// Switched while still frozen, and unfrozen once every process has
	// the switch (shardmap.Switch's contract). A process that has not
	// applied the switch in time leaves the range switched and frozen: a
	// re-run finds it so and unfreezes it.
	sw := func(ctx context.Context, db shardmap.DB, r []slots.Range) (int64, error) {
		return shardmap.Switch(ctx, db, r, s.mv.cfg.To)
	}
	if err := s.write(ctx, "switch", sw); err != nil {
		return err
	}
	if err := s.wait(ctx, false); err != nil {
		return err
	}
	return s.unfreeze(ctx)
}

func (s *shardSide) confirmSwitched(ctx context.Context) error { return s.wait(ctx, false) }

func (s *shardSide) close() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
		s.conn = nil
	}
}

// newMapSide picks the map side of cfg: the cell's shard map when Cell is
// set, the router's slot map file otherwise.
func newMapSide(mv *mover) mapSide {
	if mv.cfg.Cell != "" {
		return &shardSide{mv: mv}
	}
	return &fileSide{mv: mv}
}

// restoreAfter drops the fence and restores side after cause (the move
// stopped inside the freeze), joining what fails to cause.
func (mv *mover) restoreAfter(ctx context.Context, side mapSide, cause error) error {
	ctx = context.WithoutCancel(ctx)
	if err := mv.unfence(ctx); err != nil {
		cause = errors.Join(cause, err)
	}
	if err := side.restore(ctx); err != nil {
		cause = errors.Join(cause, err)
	}
	return cause
}

// confirmWhat names who confirms a map change, for logs.
func (mv *mover) confirmWhat() string {
	if mv.cfg.Cell != "" {
		return fmt.Sprintf("every process of cell %s", mv.cfg.Cell)
	}
	if len(mv.cfg.Routers) > 0 {
		return "every router"
	}
	return "the settle (" + mv.cfg.Settle.String() + ")"
}
