// Package slotmove moves a range of slots, and so the tenants hashed into
// it, from one cell to another: copy, verify, change the slot map, delete.
//
// The steps, each safe to run again:
//
//  1. copy: every row of the range is copied from the source cell's shards
//     to the target cell's shards, ids kept (OVERRIDING SYSTEM VALUE), rows
//     already present skipped (ON CONFLICT DO NOTHING), identity sequences
//     on the target moved past the copied ids. Traffic still flows.
//  2. freeze: the slot map marks the range frozen; routers answer its
//     tenants 503 with Retry-After: 1. After Settle (at least the routers'
//     reload interval) no router sends them to the source any more.
//  3. fence: triggers on the source tables refuse any write to the range
//     (creating them waits for write transactions in flight), so nothing a
//     slow router or request lets through can land after the final copy.
//  4. catch-up copy, then verify: row count and checksum of every table,
//     per chunk of the range, on both sides. A difference stops the move:
//     the fence is dropped and the original map restored byte for byte, so
//     routing is exactly as before.
//  5. switch: the map gives the range to the target and unfreezes it
//     (written atomically: temporary file + rename). A state file records
//     that the range was verified before the switch.
//  6. jobs: the moved tenants' waiting and scheduled jobs in the source
//     shards' jobs tables move to the target shards, verified like the
//     rows (running ones stay and finish at the source: see jobs.go).
//  7. delete: only when the map gives the range to the target and the
//     state file says it was verified, the source rows are deleted (child
//     tables first) and the fence dropped.
//
// Run again after a crash with the same arguments: the map and the state
// file say where to resume. Concurrency: one move per slot map at a time
// (the state file enforces it); Move itself is not safe to call
// concurrently on the same map.
package slotmove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/slots"
)

// Shard is one shard database of a cell.
type Shard struct {
	// Name identifies the shard in logs and errors.
	Name string
	// DSN is its PostgreSQL connection string.
	DSN string
	// Slots are its slot specs; empty on every shard of a cell splits
	// evenly, as in the spec.
	Slots []string
}

// Config describes one move. Zero fields take the defaults named on each.
type Config struct {
	// MapFile is the router's slot map file. Required.
	MapFile string
	// StateFile records a verified move between the switch and the delete.
	// Default: MapFile + ".move.json".
	StateFile string
	// Range is the slots to move.
	Range slots.Range
	// From and To name the source and target cells in the map. Required.
	From, To string
	// Source and Target are the two cells' shards. Every slot of Range
	// must have a shard on both sides.
	Source, Target []Shard
	// Tables to move, parents first (copies run in this order, deletes in
	// reverse); each needs a slot column and a primary key. Required: the
	// spec's database.tenant_tables (cmd/slotmove's default).
	Tables []string
	// SkipJobs leaves the moved tenants' jobs where they are. By default
	// the waiting and scheduled jobs in the source shards' jobs tables
	// (jobs.postgres.shard_local) move to the target shards after the
	// switch, verified like the rows; running jobs stay (see jobs.go).
	SkipJobs bool
	// ChunkSlots is how many slots one copy, verify or delete statement
	// covers. Default: 1024.
	ChunkSlots int
	// Settle is how long to wait after freezing the range before fencing
	// it: at least the routers' reload interval plus a request's usual
	// duration. Default: 3s.
	Settle time.Duration
	// ResetTarget deletes the target's rows of the range before copying,
	// to recover from a failed verify (only while the map still gives the
	// range to the source).
	ResetTarget bool
	// Logger reports progress. Default: slog.Default().
	Logger *slog.Logger
	// AfterCopy, when set, runs after the final copy and before verify
	// (tests tamper with the target here).
	AfterCopy func(ctx context.Context) error
	// Sleep waits d or until ctx ends. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Report says what a Move did.
type Report struct {
	// Resumed names the step a re-run started at ("" for a fresh move).
	Resumed string
	// Copied and Deleted count rows per table (summed over all passes).
	Copied, Deleted map[string]int64
	// Verified lists the per-table totals that matched on both sides
	// (cellgate_jobs: the jobs moved, counted once verified).
	Verified map[string]int64
	// JobsMoved counts the waiting and scheduled jobs copied to the
	// target; JobsDuplicate those dropped because the target held an
	// active job with the same uniqueness key; JobsLeftRunning the moved
	// tenants' jobs that were running at the source and stayed there.
	JobsMoved, JobsDuplicate, JobsLeftRunning int64
}

// VerifyError is a verification difference: the move stopped before the
// map switch and the map was restored.
type VerifyError struct {
	// Table and Range locate the difference.
	Table string
	Range slots.Range
	// Rows and Sums are the row counts and checksums on each side.
	SourceRows, TargetRows int64
	SourceSum, TargetSum   string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("slotmove: verify failed for table %s, slots %s: source has %d rows (checksum %s), target %d rows (checksum %s); the slot map is unchanged",
		e.Table, e.Range, e.SourceRows, e.SourceSum, e.TargetRows, e.TargetSum)
}

// state is the state file's content.
type state struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Slots string `json:"slots"`
	Step  string `json:"step"` // "verified" or "switched"
}

const (
	stepVerified = "verified"
	stepSwitched = "switched"
)

func (c Config) withDefaults() Config {
	if c.StateFile == "" {
		c.StateFile = c.MapFile + ".move.json"
	}
	if c.ChunkSlots == 0 {
		c.ChunkSlots = 1024
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Sleep == nil {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MapFile == "":
		return errors.New("slotmove: Config.MapFile is required")
	case c.From == "" || c.To == "":
		return errors.New("slotmove: Config.From and Config.To are required")
	case c.From == c.To:
		return fmt.Errorf("slotmove: Config.From and Config.To are both %q", c.From)
	case c.Range.Lo < 0 || c.Range.Hi > slots.MaxSlot || c.Range.Lo > c.Range.Hi:
		return fmt.Errorf("slotmove: Config.Range %d-%d is not a slot range in 0..%d", c.Range.Lo, c.Range.Hi, slots.MaxSlot)
	case c.ChunkSlots < 1:
		return fmt.Errorf("slotmove: Config.ChunkSlots must be >= 1, got %d", c.ChunkSlots)
	case c.Settle < 0:
		return fmt.Errorf("slotmove: Config.Settle must be >= 0, got %s", c.Settle)
	case len(c.Source) == 0 || len(c.Target) == 0:
		return errors.New("slotmove: Config.Source and Config.Target need the cells' shards")
	case len(c.Tables) == 0:
		return errors.New("slotmove: Config.Tables is empty; name the tenant tables (the spec's database.tenant_tables)")
	}
	for _, t := range c.Tables {
		if t == "" {
			return errors.New("slotmove: Config.Tables holds an empty name")
		}
	}
	return nil
}

// Move runs (or resumes) the move described by cfg.
func Move(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	rep := Report{Copied: map[string]int64{}, Deleted: map[string]int64{}, Verified: map[string]int64{}}
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	log := cfg.Logger.With("slots", cfg.Range.String(), "from", cfg.From, "to", cfg.To)
	mv, err := open(ctx, cfg, log)
	if err != nil {
		return rep, err
	}
	defer mv.close()

	origRaw, err := os.ReadFile(cfg.MapFile)
	if err != nil {
		return rep, fmt.Errorf("slotmove: %w", err)
	}
	m, r, err := cells.ParseSlotMap(origRaw)
	if err != nil {
		return rep, fmt.Errorf("slotmove: %s: %w", cfg.MapFile, err)
	}
	st, err := readState(cfg.StateFile)
	if err != nil {
		return rep, err
	}
	want := state{From: cfg.From, To: cfg.To, Slots: cfg.Range.String()}
	if st != nil && (st.From != want.From || st.To != want.To || st.Slots != want.Slots) {
		return rep, fmt.Errorf("slotmove: another move (slots %s from %s to %s) is unfinished according to %s; finish it first",
			st.Slots, st.From, st.To, cfg.StateFile)
	}
	owner, frozen, err := rangeState(r, cfg)
	if err != nil {
		return rep, err
	}

	if owner == cfg.To {
		// Already switched: only the delete is left, and only if this tool
		// verified the copy before switching.
		if st == nil || (st.Step != stepVerified && st.Step != stepSwitched) {
			left, err := mv.sourceRows(ctx)
			if err != nil {
				return rep, err
			}
			if left == 0 {
				rep.Resumed = "done"
				log.Info("nothing to do: the map gives the range to the target and the source holds none of its rows")
				return rep, nil
			}
			return rep, fmt.Errorf("slotmove: the map already gives slots %s to %s, but %s records no verified move; refusing to delete the %d rows left at %s",
				cfg.Range, cfg.To, cfg.StateFile, left, cfg.From)
		}
		rep.Resumed = "delete"
		log.Info("resuming: map already switched; deleting at the source")
		return rep, mv.finish(ctx, &rep)
	}
	if frozen {
		rep.Resumed = "freeze"
		log.Info("resuming: range already frozen")
	} else {
		if cfg.ResetTarget {
			n, err := mv.deleteRange(ctx, mv.target, "target")
			if err != nil {
				return rep, err
			}
			log.Info("target rows of the range deleted before copying", "rows", n)
		}
		if err := mv.copyAll(ctx, &rep); err != nil {
			return rep, err
		}
	}

	// Freeze, settle, fence, copy what came in meanwhile, verify.
	fm, err := m.WithFrozen(cfg.Range, true)
	if err != nil {
		return rep, err
	}
	frozenRaw := fm.Marshal()
	if err := cells.WriteFileAtomic(cfg.MapFile, frozenRaw, 0o644); err != nil {
		return rep, fmt.Errorf("slotmove: freeze: %w", err)
	}
	log.Info("range frozen in the slot map; waiting for routers to reload", "settle", cfg.Settle.String())
	if err := cfg.Sleep(ctx, cfg.Settle); err != nil {
		return rep, err
	}
	restore := func(cause error) error {
		// Put routing back exactly as it was, unless someone else has
		// changed the file meanwhile: then leave theirs and say so.
		if err := mv.unfence(context.WithoutCancel(ctx)); err != nil {
			cause = errors.Join(cause, err)
		}
		cur, err := os.ReadFile(cfg.MapFile)
		switch {
		case err != nil:
			return errors.Join(cause, err)
		case string(cur) != string(frozenRaw):
			return errors.Join(cause, fmt.Errorf("slotmove: %s changed during the move; not restoring it", cfg.MapFile))
		}
		orig := origRaw
		if frozen {
			// Resumed with the range frozen: unfreeze rather than restore
			// a frozen file.
			uf, err := m.WithFrozen(cfg.Range, false)
			if err != nil {
				return errors.Join(cause, err)
			}
			orig = uf.Marshal()
		}
		if err := cells.WriteFileAtomic(cfg.MapFile, orig, 0o644); err != nil {
			return errors.Join(cause, err)
		}
		return cause
	}
	if err := mv.fence(ctx); err != nil {
		return rep, restore(err)
	}
	log.Info("source fenced; copying what came in meanwhile")
	if err := mv.copyAll(ctx, &rep); err != nil {
		return rep, restore(err)
	}
	if cfg.AfterCopy != nil {
		if err := cfg.AfterCopy(ctx); err != nil {
			return rep, restore(err)
		}
	}
	if err := mv.verify(ctx, &rep); err != nil {
		log.Error("verify failed; slot map restored", "error", err.Error())
		return rep, restore(err)
	}
	if err := writeState(cfg.StateFile, state{From: cfg.From, To: cfg.To, Slots: cfg.Range.String(), Step: stepVerified}); err != nil {
		return rep, restore(err)
	}

	// Switch.
	sw, err := fm.Reassign(cfg.Range, cfg.From, cfg.To)
	if err == nil {
		sw, err = sw.WithFrozen(cfg.Range, false)
	}
	if err != nil {
		return rep, restore(err)
	}
	if err := cells.WriteSlotMap(cfg.MapFile, sw); err != nil {
		return rep, restore(err)
	}
	if err := writeState(cfg.StateFile, state{From: cfg.From, To: cfg.To, Slots: cfg.Range.String(), Step: stepSwitched}); err != nil {
		return rep, err
	}
	log.Info("slot map switched to the target")
	return rep, mv.finish(ctx, &rep)
}

// finish deletes the range at the source, drops the fence and the state.
func (mv *mover) finish(ctx context.Context, rep *Report) error {
	// Re-read the map: delete only what the map really gives the target.
	_, r, err := cells.ReadSlotMap(mv.cfg.MapFile)
	if err != nil {
		return err
	}
	if owner, _, err := rangeState(r, mv.cfg); err != nil || owner != mv.cfg.To {
		return fmt.Errorf("slotmove: refusing to delete: the map does not give slots %s to %s (%v)", mv.cfg.Range, mv.cfg.To, err)
	}
	// The fence must be up while deleting so that nothing can be written
	// to the range at the source again; installing it again is harmless.
	if err := mv.fence(ctx); err != nil {
		return err
	}
	if !mv.cfg.SkipJobs {
		if err := mv.moveJobs(ctx, rep); err != nil {
			return err
		}
	}
	n, err := mv.deleteRange(ctx, mv.source, "source")
	if err != nil {
		return err
	}
	for t, k := range n {
		rep.Deleted[t] += k
	}
	if err := mv.unfence(ctx); err != nil {
		return err
	}
	if err := os.Remove(mv.cfg.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	mv.log.Info("move done", "deleted", fmt.Sprint(rep.Deleted))
	return nil
}

// rangeState returns the single owner of cfg.Range and whether any of it
// is frozen; a range split between owners is an error.
func rangeState(r *cells.CellRouter, cfg Config) (owner string, frozen bool, err error) {
	for _, name := range []string{cfg.From, cfg.To} {
		if r.Index(name) < 0 {
			return "", false, fmt.Errorf("slotmove: the slot map has no cell %q", name)
		}
	}
	for s := cfg.Range.Lo; s <= cfg.Range.Hi; s++ {
		c, _ := r.ForSlot(s)
		if owner == "" {
			owner = c.Name
		} else if c.Name != owner {
			return "", false, fmt.Errorf("slotmove: slots %s are split between %s and %s; move ranges that one cell owns", cfg.Range, owner, c.Name)
		}
		frozen = frozen || r.Frozen(s)
	}
	if owner != cfg.From && owner != cfg.To {
		return "", false, fmt.Errorf("slotmove: slots %s belong to %s, neither %s nor %s", cfg.Range, owner, cfg.From, cfg.To)
	}
	return owner, frozen, nil
}

func readState(path string) (*state, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("slotmove: state: %w", err)
	}
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("slotmove: state file %s: %w", path, err)
	}
	return &st, nil
}

func writeState(path string, st state) error {
	raw, _ := json.MarshalIndent(st, "", "  ")
	return cells.WriteFileAtomic(path, append(raw, '\n'), 0o644)
}

// Layout is the slotmove command's description of each cell's shards,
// with DSNs named by environment variable as in the spec:
//
//	{"cells": {"cell-1": [{"name": "shard-0", "dsn_env": "CELL1_SHARD_0_DSN"}, ...], ...}}
type Layout struct {
	// Cells maps a cell name to its shards.
	Cells map[string][]config.Shard `json:"cells"`
}

// ReadLayout reads a layout file strictly.
func ReadLayout(path string) (Layout, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Layout{}, fmt.Errorf("slotmove: layout: %w", err)
	}
	var l Layout
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Layout{}, fmt.Errorf("slotmove: layout %s: %w", path, err)
	}
	return l, nil
}

// Shards resolves a cell's shards, reading each DSN from its variable.
func (l Layout) Shards(cell string, getenv func(string) string) ([]Shard, error) {
	specs, ok := l.Cells[cell]
	if !ok || len(specs) == 0 {
		return nil, fmt.Errorf("slotmove: layout has no shards for cell %q", cell)
	}
	out := make([]Shard, len(specs))
	for i, s := range specs {
		dsn := strings.TrimSpace(getenv(s.DSNEnv))
		if dsn == "" {
			return nil, fmt.Errorf("slotmove: layout cells.%s[%d] (%s): environment variable %q is not set", cell, i, s.Name, s.DSNEnv)
		}
		out[i] = Shard{Name: s.Name, DSN: dsn, Slots: s.Slots}
	}
	return out, nil
}
