// Package slotmove moves a range of slots, and so the tenants hashed into
// it, from one cell to another, or between two shards of one cell, online:
// the range is copied from a consistent snapshot, its changes are streamed
// from PostgreSQL logical replication until the target has caught up, and
// the tenants are refused only for a short freeze at the end.
//
// The map the move freezes and switches is its one difference by kind
// (mapside.go): between cells, the router's slot map file, confirmed by
// the routers; between shards (Config.Cell), the cell's shard map record
// in its control database (internal/shardmap), confirmed by every live
// process of the cell. The steps below say "the map" for either.
//
// The steps, each safe to run again (stream.go and verify.go say why the
// design is what it is):
//
//  1. copy: per source shard, a publication of the tables filtered on the
//     range and a logical replication slot whose exported snapshot the
//     copy reads; ids are kept (OVERRIDING SYSTEM VALUE). Traffic still
//     flows.
//  2. stream: the range's inserts, updates and deletes are applied to the
//     target (upserts and deletes by primary key) until a marker written
//     at the source comes back quickly.
//  3. verify before the freeze: count and checksum per chunk, then row by
//     row where a chunk differs, then again only the rows that differed or
//     that the stream changed since, round after round until a round
//     compares few rows. Meanwhile the target's identity sequences move
//     past the range's ids and the source's sequences, without a lock
//     (identity.go).
//  4. freeze: the map marks the range frozen; routers (or the cell's
//     processes) answer its tenants 503 with Retry-After: 1; once they
//     confirm it, none sends them to the source any more.
//  5. fence: the triggers installed on the source tables before the
//     freeze start refusing any write to the range, and the tool waits for
//     the write transactions in flight (db.go says how).
//  6. catch up to the fence (a marker written after it), then compare the
//     rows that differed or changed since the last round. A difference
//     stops the move: the fence is dropped and the original map restored
//     (a slot map file byte for byte).
//  7. switch: the map gives the range to the target and unfreezes it (a
//     slot map file written atomically: temporary file + rename; a shard
//     map switched, confirmed, then unfrozen).
//  8. finish: the replication slots and publications are dropped, the
//     moved tenants' waiting and scheduled shard-local jobs move (see
//     jobs.go), their rows of the control database's tenant table move
//     between cells (see plans.go; copied once before the freeze already;
//     a cell's shards share its control database), the source
//     rows are deleted (child tables first) and the fence dropped.
//
// Run again after a crash with the same arguments: the map and the state
// file say where to resume; Status lists the replication slots of moves
// and Abort gives a move up. Concurrency: one move per slot map (or per
// cell, between its shards) at a time (the state file enforces it); Move
// and Abort are not safe to call concurrently on the same map.
package slotmove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
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
//
// A move between two shards of one cell sets Cell and Control instead of
// MapFile: From and To then name the shards, Source and Target hold one
// shard each, and the map switched is the cell's shard map record in its
// control database (internal/shardmap), confirmed by every live process
// of the cell (shardmap.WaitApplied) instead of the routers. The control
// database is the same on both sides, so its rows (plain-enqueued jobs,
// the tenant table) stay; the shard-local jobs move as between cells.
type Config struct {
	// MapFile is the router's slot map file. Required for a move between
	// cells.
	MapFile string
	// Cell, set for a move between two shards of that cell, names it.
	Cell string
	// Control is Cell's control database, which holds its shard map.
	// Required with Cell.
	Control Shard
	// StateFile records where a move stands, so that a run after a crash
	// resumes it. Default: MapFile + ".move.json"; required with Cell.
	StateFile string
	// Range is the slots to move.
	Range slots.Range
	// From and To name the source and target cells in the map, or with
	// Cell the source and target shards. Required.
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
	// SourceControl and TargetControl, when both set, are the two cells'
	// control databases: the moved tenants' waiting and scheduled jobs in
	// them (enqueued without shard_local) move too, after the switch, as
	// the shards' jobs do (unless SkipJobs), and so do their rows of the
	// tenant table (internal/plans: their plans and overrides; see
	// plans.go). Name them for logs and the jobs' markers (e.g.
	// "cell-1/control").
	SourceControl, TargetControl Shard
	// ChunkSlots is how many slots one copy, verify or delete statement
	// covers. Default: 1024.
	ChunkSlots int
	// Routers are the base URLs of every router that reads MapFile
	// (http://host:port). With them, the freeze's settle is confirmed, not
	// guessed: after writing the frozen map the tool polls each router's
	// /readyz until it reports the frozen map's digest and no request
	// routed by the previous map still in flight, then fences; after the
	// switch it waits for each to report the switched map. Without them
	// it sleeps Settle.
	Routers []string
	// ConfirmTimeout bounds the wait for the routers to confirm a map. A
	// router that does not confirm the frozen map in time stops the move
	// (the map is restored); one that does not confirm the switched map
	// is logged. Default: 5s.
	ConfirmTimeout time.Duration
	// Settle is how long to wait after freezing the range before fencing
	// it when Routers is empty: at least the routers' reload interval plus
	// a request's usual duration. Default: 3s.
	Settle time.Duration
	// ResetTarget deletes the target's rows of the range before copying,
	// to recover from a failed verify (only while the map still gives the
	// range to the source).
	ResetTarget bool
	// Logger reports progress. Default: slog.Default().
	Logger *slog.Logger
	// CatchUpTarget: before the full verify and the freeze, the tool
	// catches up with the streams until a marker it writes at the source
	// comes back within this time. Default: 200ms.
	CatchUpTarget time.Duration
	// MaxFreezeLag, when set, bounds the freeze's catch-up: right before
	// freezing, the tool catches up once more, and if a marker still takes
	// longer than this to come back applied (the range is written faster
	// than the target applies it), it refuses to freeze and returns a
	// *FreezeLagError. Nothing is frozen then and the copy is kept: run
	// the move again later (it resumes streaming) or abort it. 0: no bound.
	MaxFreezeLag time.Duration
	// BeforeVerify, when set, runs after the initial copy and catch-up,
	// before the full verify (tests damage the target here).
	BeforeVerify func(ctx context.Context) error
	// AfterCopy, when set, runs inside the freeze once the streams have
	// delivered everything up to the fence, before the verify of what
	// changed (tests write to the fenced source here).
	AfterCopy func(ctx context.Context) error
	// Sleep waits d or until ctx ends. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error

	// OnPhase, when set, is called as the move passes each named point:
	// "copying" (one source shard copied), "copied", "streaming",
	// "settled" (frozen, the routers confirmed), "fenced", "verified",
	// "switched" and "deleting" (replication dropped, about to delete at
	// the source). cmd/slotmove uses it for crash drills
	// ($CELLGATE_SLOTMOVE_CRASH_AT).
	OnPhase func(phase string)

	// crash, set by tests, makes Move stop dead at a named point (no
	// restore, as if the process were killed) when it returns an error.
	crash func(point string) error
}

// crashAt is the test hook of Config.crash.
func (mv *mover) crashAt(point string) error {
	if mv.cfg.OnPhase != nil {
		mv.cfg.OnPhase(point)
	}
	if mv.cfg.crash == nil {
		return nil
	}
	return mv.cfg.crash(point)
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
	// TenantsMoved counts the moved tenants' rows of the control
	// database's tenant table (their plans and overrides) moved to the
	// target's (see plans.go).
	TenantsMoved int64
	// CopyTime is how long the initial copy took (Copied holds its rows).
	CopyTime time.Duration
	// PeakLag is the replication lag in time: the longest a change
	// committed at a source took to be committed at the target (on the
	// source's clock), or a catch-up's marker to come back applied, over
	// the whole move. Changes made during the initial copy wait for it,
	// so the peak is usually the first catch-up after the copy.
	PeakLag time.Duration
	// Streamed counts the changes applied from the replication streams;
	// PeakLagBytes is the largest distance seen between a source's WAL
	// position and what had been applied (the WAL written while the tool
	// copied or compared counts when it next catches up).
	Streamed, PeakLagBytes int64
	// Freeze is the time from writing the frozen map to writing the
	// switched one (with Routers: to every router confirming it), which
	// bounds how long the moving tenants were refused. Settle is the part
	// of it spent waiting for the routers. FreezeVerified counts the rows
	// compared inside it.
	Freeze, Settle time.Duration
	FreezeVerified int
	// FreezeSteps is where the freeze's time went, step by step in the
	// order they ran (see FreezeStep); their sum is Freeze.
	FreezeSteps []FreezeStep
}

// FreezeStep is one step inside the freeze and how long it took. The
// names: "map" (writing the frozen map), "routers" (every router, or for
// a move between shards every process of the cell, confirming it, or the
// Settle sleep), "fence", "catch_up" (the streams
// delivering everything up to the fence), "verify" (comparing what
// changed), "state_identity" (writing the state file while the target's
// identity sequences move past the streamed ids where one passed the
// headroom given before the freeze, usually nothing; "identity" alone when
// a resumed run switches), "switch" (writing the switched map) and
// "routers_switched".
type FreezeStep struct {
	Name string
	Took time.Duration
}

// freezeClock records FreezeSteps: each mark closes the step that began
// at the previous mark.
type freezeClock struct {
	rep  *Report
	last time.Time
}

func (c *freezeClock) mark(name string) {
	now := time.Now()
	c.rep.FreezeSteps = append(c.rep.FreezeSteps, FreezeStep{Name: name, Took: now.Sub(c.last)})
	c.last = now
}

// CopyRate is the initial copy's rows per second (0 when this run did not
// copy).
func (r Report) CopyRate() int64 {
	var n int64
	for _, k := range r.Copied {
		n += k
	}
	if r.CopyTime <= 0 {
		return 0
	}
	return int64(float64(n) / r.CopyTime.Seconds())
}

// FreezeStepsString is the steps as "map=1ms routers=52ms ...", for logs.
func (r Report) FreezeStepsString() string {
	parts := make([]string, len(r.FreezeSteps))
	for i, s := range r.FreezeSteps {
		parts[i] = s.Name + "=" + s.Took.Round(100*time.Microsecond).String()
	}
	return strings.Join(parts, " ")
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

// FreezeLagError is the refusal to freeze while the streams lag more than
// Config.MaxFreezeLag behind the source.
type FreezeLagError struct {
	// Lag is the last catch-up's marker round trip; Max the bound.
	Lag, Max time.Duration
	// Bytes is how far the streams were behind the source's WAL then.
	Bytes int64
}

func (e *FreezeLagError) Error() string {
	return fmt.Sprintf("slotmove: not freezing: the streams lag %s (%d bytes of WAL) behind the source after catching up, more than the bound %s (-max-freeze-lag); nothing is frozen and the copy is kept: run the move again when the range is written less (it resumes streaming), raise the bound, or abort it",
		e.Lag.Round(time.Millisecond), e.Bytes, e.Max)
}

// state is the state file's content.
type state struct {
	Cell  string `json:"cell,omitempty"` // a move between shards of this cell
	From  string `json:"from"`
	To    string `json:"to"`
	Slots string `json:"slots"`
	Step  string `json:"step"` // one of the step* constants
}

const (
	stepCopying   = "copying"   // slots created, initial copy under way
	stepStreaming = "streaming" // initial copy done; the slots stream
	stepVerified  = "verified"  // verified inside the freeze
	stepSwitched  = "switched"  // the map gives the range to the target
)

func (c Config) withDefaults() Config {
	if c.StateFile == "" && c.Cell == "" {
		c.StateFile = c.MapFile + ".move.json"
	}
	if c.ChunkSlots == 0 {
		c.ChunkSlots = 1024
	}
	if c.CatchUpTarget == 0 {
		c.CatchUpTarget = 200 * time.Millisecond
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Second
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = 5 * time.Second
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
	case c.Cell != "" && c.MapFile != "":
		return errors.New("slotmove: Config.Cell (a move between shards of one cell) and Config.MapFile (between cells) exclude each other")
	case c.Cell != "" && c.Control.DSN == "":
		return fmt.Errorf("slotmove: Config.Control is required: the control database of cell %s holds its shard map", c.Cell)
	case c.Cell != "" && c.StateFile == "":
		return errors.New("slotmove: Config.StateFile is required for a move between shards")
	case c.Cell != "" && len(c.Routers) > 0:
		return errors.New("slotmove: Config.Routers: a move between shards of one cell is confirmed by the cell's processes, not by routers")
	case c.Cell != "" && (len(c.Source) != 1 || len(c.Target) != 1):
		return fmt.Errorf("slotmove: Config.Source and Config.Target: a move between shards takes one shard each, got %d and %d", len(c.Source), len(c.Target))
	case c.Cell == "" && c.MapFile == "":
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
	case c.MaxFreezeLag < 0:
		return fmt.Errorf("slotmove: Config.MaxFreezeLag must be >= 0 (0: no bound), got %s", c.MaxFreezeLag)
	case c.ConfirmTimeout < 0:
		return fmt.Errorf("slotmove: Config.ConfirmTimeout must be > 0, got %s", c.ConfirmTimeout)
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
	for i, r := range c.Routers {
		if u, err := url.Parse(r); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("slotmove: Config.Routers[%d] %q is not an http(s) base URL of a router", i, r)
		}
	}
	return nil
}

// Move runs (or resumes) the move described by cfg.
func Move(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg = cfg.withDefaults()
	rep = Report{Copied: map[string]int64{}, Deleted: map[string]int64{}, Verified: map[string]int64{}}
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	log := cfg.logger()
	mv, err := open(ctx, cfg, log)
	if err != nil {
		return rep, err
	}
	defer mv.close()
	defer func() {
		rep.Streamed, rep.PeakLagBytes, rep.PeakLag = mv.streamed, mv.peakLag, mv.peakLagTime
	}()

	side := newMapSide(mv)
	defer side.close()
	st, err := readState(cfg.StateFile)
	if err != nil {
		return rep, err
	}
	want := cfg.state("")
	if st != nil && (st.Cell != want.Cell || st.From != want.From || st.To != want.To || st.Slots != want.Slots) {
		return rep, fmt.Errorf("slotmove: another move (slots %s from %s to %s) is unfinished according to %s; finish it first",
			st.Slots, st.From, st.To, cfg.StateFile)
	}
	owner, frozen, err := side.load(ctx)
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
				// A crash after the delete may have left the slot.
				if err := mv.dropReplication(ctx); err != nil {
					return rep, err
				}
				log.Info("nothing to do: the map gives the range to the target and the source holds none of its rows")
				return rep, nil
			}
			return rep, fmt.Errorf("slotmove: the map already gives slots %s to %s, but %s records no verified move; refusing to delete the %d rows left at %s",
				cfg.Range, cfg.To, cfg.StateFile, left, cfg.From)
		}
		if frozen {
			// Switched, but a run died before serving the range again
			// (a shard map is switched and unfrozen in two writes).
			if err := side.unfreeze(ctx); err != nil {
				return rep, err
			}
			log.Info("resuming: range switched but still frozen; unfrozen")
		}
		rep.Resumed = "delete"
		log.Info("resuming: map already switched; deleting at the source")
		return rep, mv.finish(ctx, &rep, side)
	}
	if err := mv.preflight(ctx); err != nil {
		return rep, err
	}

	if frozen && st != nil && st.Step == stepVerified {
		// Verified inside the freeze, crashed before the switch: the fence
		// has been up since, and only the stream writes the target, so the
		// verdict still holds.
		rep.Resumed = "switch"
		log.Info("resuming: range verified while frozen; switching")
		return rep, mv.switchAndFinish(ctx, &rep, side, &freezeClock{rep: &rep, last: time.Now()}, false)
	}
	if frozen {
		// A run died inside the freeze: give the range back to its
		// tenants first, then start the freeze over.
		if err := mv.unfence(ctx); err != nil {
			return rep, err
		}
		if err := side.unfreeze(ctx); err != nil {
			return rep, err
		}
		log.Info("resuming: a run stopped inside the freeze; range unfrozen and unfenced")
	}

	resumable := !cfg.ResetTarget && st != nil && st.Step == stepStreaming
	if resumable {
		ok, err := mv.hasReplication(ctx)
		if err != nil {
			return rep, err
		}
		resumable = ok
	}
	if resumable {
		rep.Resumed = "stream"
		log.Info("resuming: copy done; streaming from the replication slots")
	} else {
		if st != nil || cfg.ResetTarget {
			// An earlier run's slots, publications and partial copy are of
			// no use without its snapshot: start over.
			if err := mv.dropReplication(ctx); err != nil {
				return rep, err
			}
			n, err := mv.deleteRange(ctx, mv.target, "target")
			if err != nil {
				return rep, err
			}
			if st != nil {
				rep.Resumed = "copy"
			}
			log.Info("starting over: target rows of the range deleted, replication slots dropped", "rows", fmt.Sprint(n))
		} else if err := mv.targetEmpty(ctx); err != nil {
			return rep, err
		}
		if err := writeState(cfg.StateFile, cfg.state(stepCopying)); err != nil {
			return rep, err
		}
		if err := mv.initialCopy(ctx, &rep); err != nil {
			return rep, err
		}
		if err := mv.crashAt("copied"); err != nil {
			return rep, err
		}
		if err := writeState(cfg.StateFile, cfg.state(stepStreaming)); err != nil {
			return rep, err
		}
	}
	if err := mv.startStreams(ctx); err != nil {
		return rep, err
	}
	if err := mv.crashAt("streaming"); err != nil {
		return rep, err
	}

	// Catch up until a marker comes back quickly, verify everything once
	// and then what changed meanwhile (the streams paused each time), then
	// freeze: the freeze is left with only the last moments' changes to
	// apply and compare.
	if _, _, err := mv.catchUpQuick(ctx); err != nil {
		return rep, err
	}
	if cfg.BeforeVerify != nil {
		if err := cfg.BeforeVerify(ctx); err != nil {
			return rep, err
		}
	}
	if err := mv.fullVerify(ctx, &rep); err != nil {
		return rep, err
	}
	// The target cell learns the moved tenants' plans before it serves
	// them; the rows move for good after the switch.
	if err := mv.movePlans(ctx, &rep, false); err != nil {
		return rep, err
	}
	// The fence's triggers go in now, down: their creation waits for the
	// tables' writers, which the freeze would otherwise wait for.
	if err := mv.installFence(ctx); err != nil {
		return rep, err
	}
	// The target's identity sequences go past the range's rows there and
	// the source's sequences now, without a lock (identity.go), so that
	// the freeze has nothing to do for them.
	if err := mv.advanceIdentity(ctx, identFull); err != nil {
		return rep, err
	}
	// Catch up and compare what changed since, round after round, until a
	// round compares few keys: the streams pause while it compares, so a
	// short last round leaves the freeze only the changes of its own
	// moments to apply and compare. The freeze follows at once.
	prev := -1
	for round := 1; ; round++ {
		if _, _, err := mv.catchUpQuick(ctx); err != nil {
			return rep, err
		}
		n, err := mv.keyVerify(ctx, false)
		if err != nil {
			return rep, err
		}
		log.Info("verified what changed", "round", round, "rows", n, "rows_to_check_again", mv.mismatchedCount())
		if round >= 2 && (n <= freezeKeysTarget || n >= prev) || round >= maxKeyRounds {
			break
		}
		prev = n
	}
	// Past what the source has handed out during the rounds too.
	if err := mv.advanceIdentity(ctx, identTopUp); err != nil {
		return rep, err
	}
	// The streams paused during the last compare round: apply what was
	// written meanwhile now, so the freeze's catch-up covers only its own
	// moments. The bound, if any, is checked on this last catch-up.
	lag, lagBytes, err := mv.catchUpQuick(ctx)
	if err != nil {
		return rep, err
	}
	if cfg.MaxFreezeLag > 0 && lag > cfg.MaxFreezeLag {
		return rep, &FreezeLagError{Lag: lag, Max: cfg.MaxFreezeLag, Bytes: lagBytes}
	}

	// Freeze, settle, fence, catch up to the fence, verify what changed.
	frozenAt := time.Now()
	clock := &freezeClock{rep: &rep, last: frozenAt}
	if err := side.freeze(ctx); err != nil {
		return rep, err
	}
	clock.mark("map")
	log.Info("phase: freeze; range frozen in the map, waiting for " + mv.confirmWhat() + " to confirm it")
	restore := func(cause error) error { return mv.restoreAfter(ctx, side, cause) }
	if err := side.settle(ctx); err != nil {
		return rep, restore(err)
	}
	clock.mark("routers")
	rep.Settle = time.Since(frozenAt)
	log.Info("frozen map confirmed", "by", mv.confirmWhat(), "settle", rep.Settle.Round(time.Millisecond).String())
	if err := mv.crashAt("settled"); err != nil {
		return rep, err
	}
	if err := mv.activateFence(ctx); err != nil {
		return rep, restore(err)
	}
	clock.mark("fence")
	if err := mv.crashAt("fenced"); err != nil {
		return rep, err
	}
	if _, _, err := mv.catchUp(ctx); err != nil {
		return rep, restore(err)
	}
	clock.mark("catch_up")
	if cfg.AfterCopy != nil {
		if err := cfg.AfterCopy(ctx); err != nil {
			return rep, restore(err)
		}
	}
	n, err := mv.keyVerify(ctx, true)
	if err != nil {
		log.Error("verify failed; map restored", "error", err.Error())
		return rep, restore(err)
	}
	rep.FreezeVerified = n
	clock.mark("verify")
	// The state file and the target's identity sequences at once: the
	// switch needs both, neither needs the other. The sequences need
	// something only where the stream applied an id past the headroom
	// given before the freeze: then a few nextval calls, no lock.
	stateErr := make(chan error, 1)
	go func() {
		stateErr <- writeState(cfg.StateFile, cfg.state(stepVerified))
	}()
	idErr := mv.advanceIdentity(ctx, identFreeze)
	if err := errors.Join(<-stateErr, idErr); err != nil {
		return rep, restore(err)
	}
	clock.mark("state_identity")
	log.Info("verified inside the freeze", "rows", n, "steps", rep.FreezeStepsString())
	if err := mv.crashAt("verified"); err != nil {
		return rep, err
	}
	return rep, mv.switchAndFinish(ctx, &rep, side, clock, true)
}

// logger is the move's logger, naming the move in every line.
func (c Config) logger() *slog.Logger {
	log := c.Logger.With("slots", c.Range.String(), "from", c.From, "to", c.To)
	if c.Cell != "" {
		log = log.With("cell", c.Cell)
	}
	return log
}

// state is the state file's content at step.
func (c Config) state(step string) state {
	return state{Cell: c.Cell, From: c.From, To: c.To, Slots: c.Range.String(), Step: step}
}

// freezeKeysTarget and maxKeyRounds end the compare rounds before the
// freeze: once a round (the second or later) compares at most
// freezeKeysTarget keys (one statement per side and table) or no fewer
// than the round before, or after maxKeyRounds rounds (a range changed
// faster than it can be compared still moves, with a longer freeze).
const (
	freezeKeysTarget = 2000
	maxKeyRounds     = 10
)

func (mv *mover) mismatchedCount() int {
	n := 0
	for _, m := range mv.mismatched {
		n += len(m)
	}
	return n
}

// catchUpQuick catches up with the streams until a marker comes back
// within CatchUpTarget (at most 20 rounds: a range written faster than it
// can be applied still moves, with a longer freeze, unless MaxFreezeLag
// bounds it). It returns the last round's marker round trip and WAL lag.
func (mv *mover) catchUpQuick(ctx context.Context) (time.Duration, int64, error) {
	for round := 1; ; round++ {
		rtt, lag, err := mv.catchUp(ctx)
		if err != nil {
			return 0, 0, err
		}
		mv.log.Info("caught up", "phase", "stream", "round", round, "lag", rtt.Round(time.Millisecond).String(), "lag_bytes", lag, "changes_applied", mv.streamed)
		if rtt <= mv.cfg.CatchUpTarget || round >= 20 {
			return rtt, lag, nil
		}
	}
}

// switchAndFinish moves the target's identity sequences past the streamed
// ids (unless identityDone), gives the range to the target (unfrozen), and
// finishes the move.
func (mv *mover) switchAndFinish(ctx context.Context, rep *Report, side mapSide, clock *freezeClock, identityDone bool) error {
	cfg := mv.cfg
	if !identityDone {
		if err := mv.advanceIdentity(ctx, identFreeze); err != nil {
			return err
		}
		clock.mark("identity")
	}
	if err := side.switchOver(ctx); err != nil {
		return err
	}
	clock.mark("switch")
	if cfg.Cell != "" || len(cfg.Routers) > 0 {
		// The tenants are served again once every reader has the new map.
		if err := side.confirmSwitched(ctx); err != nil {
			mv.log.Warn("the map is switched, but a reader of it has not confirmed it; it refuses or misroutes the range's tenants until it reloads", "error", err.Error())
		}
		clock.mark("routers_switched")
	}
	for _, s := range rep.FreezeSteps {
		rep.Freeze += s.Took
	}
	if err := writeState(cfg.StateFile, cfg.state(stepSwitched)); err != nil {
		return err
	}
	mv.log.Info("map switched to the target", "freeze", rep.Freeze.Round(time.Millisecond).String(), "keys_verified_in_freeze", rep.FreezeVerified,
		"steps", rep.FreezeStepsString())
	if err := mv.crashAt("switched"); err != nil {
		return err
	}
	return mv.finish(ctx, rep, side)
}

// finish drops the replication, deletes the range at the source, drops
// the fence and the state.
func (mv *mover) finish(ctx context.Context, rep *Report, side mapSide) error {
	// Re-read the map: delete only what the map really gives the target.
	if owner, _, err := side.load(ctx); err != nil || owner != mv.cfg.To {
		return fmt.Errorf("slotmove: refusing to delete: the map does not give slots %s to %s (%v)", mv.cfg.Range, mv.cfg.To, err)
	}
	// The source's changes no longer matter: an abandoned slot would hold
	// WAL forever, so it goes first.
	if err := mv.dropReplication(ctx); err != nil {
		return err
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
	if err := mv.movePlans(ctx, rep, true); err != nil {
		return err
	}
	if err := mv.crashAt("deleting"); err != nil {
		return err
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
//	{"cells": {"cell-1": [{"name": "shard-0", "dsn_env": "CELL1_SHARD_0_DSN"}, ...], ...},
//	 "routers": ["http://10.0.0.9:8090"]}
type Layout struct {
	// Cells maps a cell name to its shards.
	Cells map[string][]config.Shard `json:"cells"`
	// Routers are the base URLs of every router reading the slot map
	// (Config.Routers); optional.
	Routers []string `json:"routers,omitempty"`
	// Control names, per cell, the variable holding its control
	// database's DSN; with both cells of a move named, their control
	// databases' jobs of the moved tenants move too (Config.SourceControl).
	Control map[string]string `json:"control,omitempty"`
}

// ControlDB resolves a cell's control database from Control; the zero
// Shard when the layout names none.
func (l Layout) ControlDB(cell string, getenv func(string) string) (Shard, error) {
	env, ok := l.Control[cell]
	if !ok {
		return Shard{}, nil
	}
	dsn := strings.TrimSpace(getenv(env))
	if dsn == "" {
		return Shard{}, fmt.Errorf("slotmove: layout control.%s: environment variable %q is not set", cell, env)
	}
	return Shard{Name: cell + "/control", DSN: dsn}, nil
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
