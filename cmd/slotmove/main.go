// Command slotmove moves a slot range, and the tenants in it, from one cell
// to another online: snapshot copy → the range's changes streamed by
// logical replication → a short freeze to catch up and verify what
// changed → switch the router's slot map → delete at the source (see
// internal/cells/slotmove and docs/cells.md).
//
//	slotmove -map deploy/slotmap.json -layout cells.layout.json \
//	         -slots 100-199 -from cell-1 -to cell-2 [-routers http://r1:8090,...] [-confirm-timeout 5s]
//	         [-settle 3s] [-max-freeze-lag 0] [-reset-target] [-tables a,b] [-skip-jobs] [-metrics-file slotmove.prom]
//	slotmove -layout cells.layout.json -cell cell-1 -from-shard shard-0 -to-shard shard-1 \
//	         -slots 4096-8191 [-state cell-1.shardmove.json] [-confirm-timeout 5s] [-reset-target] [-tables a,b] [-skip-jobs]
//	slotmove status -layout cells.layout.json [-map deploy/slotmap.json | -cell cell-1]
//	slotmove check  -layout cells.layout.json [-tables a,b]
//	slotmove abort  -map deploy/slotmap.json -layout cells.layout.json -slots 100-199 -from cell-1 -to cell-2
//	slotmove abort  -layout cells.layout.json -cell cell-1 -from-shard shard-0 -to-shard shard-1 -slots 4096-8191
//
// With -cell, the range moves between two shards of that cell: the map
// switched is the cell's shard map in its control database (the layout's
// "control" names the variable holding its DSN), and every live process
// of the cell confirms each change instead of the routers. The cell's
// control database rows stay; its shard-local jobs move.
//
// check connects to every shard of the layout and fails, in one line
// naming the shard or table and the fix, where an online move could not
// stream (wal_level, replica identity); status lists the moves' replication slots on every shard of the layout
// (a slot nobody reads holds WAL on its server forever) and the map's
// unfinished move; abort drops a move's slots, publications and fence and
// gives the range back to the source, unfrozen.
//
// It moves the spec's tenant tables (database.tenant_tables, parents
// first) unless -tables names others, and the moved tenants' waiting and
// scheduled shard-local jobs unless -skip-jobs.
//
// $CELLGATE_SLOTMOVE_CRASH_AT=<phase> makes the move kill itself with
// SIGKILL at that point (a crash drill; phases: copying, copied,
// streaming, settled, fenced, verified, switched, deleting).
//
// The layout file names each cell's shards and the environment variables
// holding their DSNs. Re-run the same command after any failure: it
// resumes where the map and its state file say.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	genspec "github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/cells/slotmove"
	"github.com/cellgate/cellgate/internal/slots"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], log, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the flag package has printed the usage
		}
		log.Error("slot move failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger, getenv func(string) string) error {
	cmd := "move"
	if len(args) > 0 && (args[0] == "status" || args[0] == "abort" || args[0] == "check") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "status":
		return status(ctx, args, os.Stdout, getenv)
	case "check":
		return check(ctx, args, os.Stdout, getenv)
	}
	fs := flag.NewFlagSet("slotmove "+cmd, flag.ContinueOnError)
	mapFile := fs.String("map", "", "the router's slot map file (rewritten atomically); for a move between cells")
	layoutFile := fs.String("layout", "", "JSON file naming each cell's shards and their DSN variables")
	spec := fs.String("slots", "", "slot range to move, e.g. 100-199")
	from := fs.String("from", "", "source cell")
	to := fs.String("to", "", "target cell")
	cell := fs.String("cell", "", "move between two shards of this cell (with -from-shard and -to-shard) instead of between cells")
	fromShard := fs.String("from-shard", "", "with -cell: the source shard")
	toShard := fs.String("to-shard", "", "with -cell: the target shard")
	state := fs.String("state", "", "state file (default: <map>.move.json; with -cell: <layout>.<cell>.move.json)")
	tables := fs.String("tables", strings.Join(defaultTables(genspec.Config().Database.TenantTables, genspec.Config().IdempotentRoutes()), ","), "tables to move, parents first (default: the spec's database.tenant_tables, and the idempotency keys' table when a route is idempotent)")
	skipJobs := fs.Bool("skip-jobs", false, "leave the moved tenants' waiting and scheduled jobs at the source")
	chunk := fs.Int("chunk", 1024, "slots per copy/verify/delete statement")
	settle := fs.Duration("settle", 3*time.Second, "without routers to confirm: wait after freezing, at least the routers' reload interval plus a request's duration")
	routers := fs.String("routers", "", "comma-separated base URLs of every router reading the map (default: the layout's \"routers\"); the tool waits until each confirms the frozen map instead of sleeping -settle")
	confirm := fs.Duration("confirm-timeout", 5*time.Second, "how long the routers (with -cell: the cell's processes) may take to confirm a map before the move stops")
	maxLag := fs.Duration("max-freeze-lag", 0, "refuse to freeze while the streams, caught up, still lag more than this behind the source (the move stays resumable); 0: no bound")
	reset := fs.Bool("reset-target", false, "delete the target's rows of the range before copying (after a failed verify)")
	metricsFile := fs.String("metrics-file", "", "write the run's cellgate_slotmove_* metrics to this Prometheus textfile when it ends (e.g. for node_exporter's textfile collector)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tables == "" {
		return errors.New("-tables is empty and the spec declares no database.tenant_tables")
	}
	var cfg slotmove.Config
	var err error
	if *cell != "" || *fromShard != "" || *toShard != "" {
		cfg, err = shardMove(fs, *cell, *fromShard, *toShard, *mapFile, *from, *to, *routers, *layoutFile, *spec, *state, getenv)
	} else {
		cfg, err = cellMove(fs, *mapFile, *from, *to, *routers, *layoutFile, *spec, *state, getenv)
	}
	if err != nil {
		return err
	}
	cfg.Tables = strings.Split(*tables, ",")
	cfg.ChunkSlots, cfg.Settle, cfg.ConfirmTimeout, cfg.MaxFreezeLag = *chunk, *settle, *confirm, *maxLag
	cfg.ResetTarget, cfg.SkipJobs, cfg.Logger = *reset, *skipJobs, log
	rg := cfg.Range
	if cmd == "abort" {
		return slotmove.Abort(ctx, cfg)
	}
	at := getenv("CELLGATE_SLOTMOVE_CRASH_AT")
	cfg.OnPhase = func(phase string) {
		log.Info("phase reached", "phase", phase)
		if phase == at {
			// A crash drill: die as a killed process would, at a named
			// point, to rehearse (and test) that a re-run finishes the move.
			log.Warn("crash drill: killing this process", "phase", phase)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	start := time.Now()
	rep, err := slotmove.Move(ctx, cfg)
	took := time.Since(start)
	if *metricsFile != "" {
		if merr := slotmove.WriteMetricsFile(*metricsFile, rep, err == nil, time.Now()); merr != nil {
			log.Error("metrics file not written", "path", *metricsFile, "error", merr.Error())
		}
	}
	if err != nil {
		return err
	}
	log.Info("slot move complete", "slots", rg.String(), "cell", cfg.Cell, "from", cfg.From, "to", cfg.To,
		"took", took.Round(time.Millisecond).String(),
		"copied", fmt.Sprint(rep.Copied), "copy_time", rep.CopyTime.Round(time.Millisecond).String(), "copy_rows_per_s", rep.CopyRate(),
		"streamed", rep.Streamed, "peak_lag_bytes", rep.PeakLagBytes, "peak_lag", rep.PeakLag.Round(time.Millisecond).String(),
		"freeze", rep.Freeze.Round(time.Millisecond).String(), "settle", rep.Settle.Round(time.Millisecond).String(), "freeze_steps", rep.FreezeStepsString(), "verified_in_freeze", rep.FreezeVerified,
		"verified", fmt.Sprint(rep.Verified), "deleted", fmt.Sprint(rep.Deleted), "resumed", rep.Resumed,
		"jobs_moved", rep.JobsMoved, "jobs_duplicate", rep.JobsDuplicate, "jobs_left_running", rep.JobsLeftRunning,
		"tenant_rows_moved", rep.TenantsMoved)
	return nil
}

// cellMove is the Config of a move between two cells.
func cellMove(fs *flag.FlagSet, mapFile, from, to, routers, layoutFile, spec, state string, getenv func(string) string) (slotmove.Config, error) {
	if mapFile == "" || layoutFile == "" || spec == "" || from == "" || to == "" {
		fs.Usage()
		return slotmove.Config{}, errors.New("-map, -layout, -slots, -from and -to are required (or -cell, -from-shard and -to-shard to move between shards of one cell)")
	}
	rg, err := slots.ParseSpec(spec)
	if err != nil {
		return slotmove.Config{}, fmt.Errorf("-slots: %w", err)
	}
	layout, err := slotmove.ReadLayout(layoutFile)
	if err != nil {
		return slotmove.Config{}, err
	}
	// Every lookup runs, so one error names each cell the layout lacks.
	src, srcErr := layout.Shards(from, getenv)
	dst, dstErr := layout.Shards(to, getenv)
	srcCtl, srcCtlErr := layout.ControlDB(from, getenv)
	dstCtl, dstCtlErr := layout.ControlDB(to, getenv)
	if err := errors.Join(srcErr, dstErr, srcCtlErr, dstCtlErr); err != nil {
		return slotmove.Config{}, err
	}
	rts := layout.Routers
	if routers != "" {
		rts = strings.Split(routers, ",")
	}
	return slotmove.Config{
		MapFile: mapFile, StateFile: state, Range: rg, From: from, To: to,
		Source: src, Target: dst, SourceControl: srcCtl, TargetControl: dstCtl, Routers: rts,
	}, nil
}

// shardMove is the Config of a move between two shards of one cell.
func shardMove(fs *flag.FlagSet, cell, fromShard, toShard, mapFile, from, to, routers, layoutFile, spec, state string, getenv func(string) string) (slotmove.Config, error) {
	switch {
	case mapFile != "" || from != "" || to != "" || routers != "":
		return slotmove.Config{}, errors.New("-cell moves between shards of one cell, confirmed by its processes: drop -map, -from, -to and -routers (they are for a move between cells)")
	case cell == "" || fromShard == "" || toShard == "" || layoutFile == "" || spec == "":
		fs.Usage()
		return slotmove.Config{}, errors.New("a move between shards needs -cell, -from-shard, -to-shard, -layout and -slots")
	case fromShard == toShard:
		return slotmove.Config{}, fmt.Errorf("-from-shard and -to-shard are both %q", fromShard)
	}
	rg, err := slots.ParseSpec(spec)
	if err != nil {
		return slotmove.Config{}, fmt.Errorf("-slots: %w", err)
	}
	layout, err := slotmove.ReadLayout(layoutFile)
	if err != nil {
		return slotmove.Config{}, err
	}
	if _, ok := layout.Cells[cell]; !ok {
		return slotmove.Config{}, fmt.Errorf("-cell %q: the layout %s has no such cell", cell, layoutFile)
	}
	all, err := layout.Shards(cell, getenv)
	if err != nil {
		return slotmove.Config{}, err
	}
	pick := func(flagName, name string) (slotmove.Shard, error) {
		var names []string
		for _, sh := range all {
			if sh.Name == name {
				// The cell's shard map, not the layout, says which slots
				// the shard holds.
				sh.Slots = nil
				return sh, nil
			}
			names = append(names, sh.Name)
		}
		return slotmove.Shard{}, fmt.Errorf("-%s %q: cell %s has no such shard in the layout (it has %s)", flagName, name, cell, strings.Join(names, ", "))
	}
	src, err := pick("from-shard", fromShard)
	if err != nil {
		return slotmove.Config{}, err
	}
	dst, err := pick("to-shard", toShard)
	if err != nil {
		return slotmove.Config{}, err
	}
	ctl, err := layout.ControlDB(cell, getenv)
	if err != nil {
		return slotmove.Config{}, err
	}
	if ctl.DSN == "" {
		return slotmove.Config{}, fmt.Errorf("-cell %q: the layout %s names no control database for it (\"control\": {%q: \"<DSN variable>\"}); its shard map lives there", cell, layoutFile, cell)
	}
	if state == "" {
		state = shardStateFile(layoutFile, cell)
	}
	return slotmove.Config{
		Cell: cell, Control: ctl, StateFile: state, Range: rg, From: fromShard, To: toShard,
		Source: []slotmove.Shard{src}, Target: []slotmove.Shard{dst},
	}, nil
}

// shardStateFile is the default state file of a move between shards of
// cell: one unfinished move per cell at a time, as per slot map.
func shardStateFile(layoutFile, cell string) string {
	return layoutFile + "." + cell + ".move.json"
}

// check connects to every shard of the layout's cells and checks what an
// online move needs of a source (slotmove.CheckShard).
func check(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("slotmove check", flag.ContinueOnError)
	layoutFile := fs.String("layout", "", "JSON file naming each cell's shards and their DSN variables")
	tables := fs.String("tables", strings.Join(genspec.Config().Database.TenantTables, ","), "tables to check (default: the spec's database.tenant_tables)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *layoutFile == "" {
		fs.Usage()
		return errors.New("-layout is required")
	}
	layout, err := slotmove.ReadLayout(*layoutFile)
	if err != nil {
		return err
	}
	cellNames := make([]string, 0, len(layout.Cells))
	for c := range layout.Cells {
		cellNames = append(cellNames, c)
	}
	sort.Strings(cellNames)
	for _, c := range cellNames {
		shards, err := layout.Shards(c, getenv)
		if err != nil {
			return err
		}
		for _, sh := range shards {
			if err := slotmove.CheckShard(ctx, sh, strings.Split(*tables, ",")); err != nil {
				return fmt.Errorf("cell %s: %w", c, err)
			}
			fmt.Fprintf(out, "ok: cell %s shard %s can stream online moves\n", c, sh.Name)
		}
	}
	return nil
}

// status prints the moves' replication slots on every shard of the
// layout, and the unfinished move the map's state file records.
func status(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("slotmove status", flag.ContinueOnError)
	layoutFile := fs.String("layout", "", "JSON file naming each cell's shards and their DSN variables")
	mapFile := fs.String("map", "", "the router's slot map file (to show its unfinished move)")
	cell := fs.String("cell", "", "a cell whose unfinished move between shards to show (its default state file)")
	state := fs.String("state", "", "state file (default: <map>.move.json; with -cell: <layout>.<cell>.move.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *layoutFile == "" {
		fs.Usage()
		return errors.New("-layout is required")
	}
	layout, err := slotmove.ReadLayout(*layoutFile)
	if err != nil {
		return err
	}
	cellNames := make([]string, 0, len(layout.Cells))
	for c := range layout.Cells {
		cellNames = append(cellNames, c)
	}
	sort.Strings(cellNames)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tSHARD\tREPLICATION SLOT\tACTIVE\tWAL HELD")
	n := 0
	for _, c := range cellNames {
		shards, err := layout.Shards(c, getenv)
		if err != nil {
			return err
		}
		slots, err := slotmove.Status(ctx, shards)
		if err != nil {
			return err
		}
		for _, s := range slots {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d bytes\n", c, s.Shard, s.Slot, s.Active, s.RetainedBytes)
			n++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(out, "no replication slots of moves")
	} else {
		fmt.Fprintln(out, "an inactive slot holds WAL until dropped: run the move again, or `slotmove abort` with its arguments")
	}
	if *mapFile != "" || *cell != "" || *state != "" {
		path := *state
		switch {
		case path != "":
		case *cell != "":
			path = shardStateFile(*layoutFile, *cell)
		default:
			path = *mapFile + ".move.json"
		}
		raw, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintln(out, "no unfinished move in", path)
		case err != nil:
			return err
		default:
			fmt.Fprintf(out, "unfinished move (%s): %s\n", path, strings.TrimSpace(string(raw)))
		}
	}
	return nil
}

// idempotencyTable is internal/runtime/idempotency.Table, named here since
// this tool links no Echo (the runtime package does).
const idempotencyTable = "cellgate_idempotency_keys"

// defaultTables are the spec's tenant tables, then the runtime's
// idempotency keys when a route is idempotent: a key carries its tenant's
// slot, so it moves with the tenant (a replayed answer stays available).
func defaultTables(tenantTables []string, idempotent bool) []string {
	out := append([]string(nil), tenantTables...)
	if idempotent {
		out = append(out, idempotencyTable)
	}
	return out
}
