// Command slotmove moves a slot range, and the tenants in it, from one cell
// to another: copy → verify → switch the router's slot map → delete at the
// source (see internal/cells/slotmove and docs/cells.md).
//
//	slotmove -map deploy/slotmap.json -layout cells.layout.json \
//	         -slots 100-199 -from cell-1 -to cell-2 [-settle 3s] [-reset-target] [-tables a,b] [-skip-jobs]
//
// It moves the spec's tenant tables (database.tenant_tables, parents
// first) unless -tables names others, and the moved tenants' waiting and
// scheduled shard-local jobs unless -skip-jobs.
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
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
	fs := flag.NewFlagSet("slotmove", flag.ContinueOnError)
	mapFile := fs.String("map", "", "the router's slot map file (rewritten atomically)")
	layoutFile := fs.String("layout", "", "JSON file naming each cell's shards and their DSN variables")
	spec := fs.String("slots", "", "slot range to move, e.g. 100-199")
	from := fs.String("from", "", "source cell")
	to := fs.String("to", "", "target cell")
	state := fs.String("state", "", "state file (default: <map>.move.json)")
	tables := fs.String("tables", strings.Join(genspec.Config().Database.TenantTables, ","), "tables to move, parents first (default: the spec's database.tenant_tables)")
	skipJobs := fs.Bool("skip-jobs", false, "leave the moved tenants' waiting and scheduled jobs at the source")
	chunk := fs.Int("chunk", 1024, "slots per copy/verify/delete statement")
	settle := fs.Duration("settle", 3*time.Second, "wait after freezing: at least the routers' reload interval plus a request's duration")
	reset := fs.Bool("reset-target", false, "delete the target's rows of the range before copying (after a failed verify)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tables == "" {
		return errors.New("-tables is empty and the spec declares no database.tenant_tables")
	}
	if *mapFile == "" || *layoutFile == "" || *spec == "" || *from == "" || *to == "" {
		fs.Usage()
		return errors.New("-map, -layout, -slots, -from and -to are required")
	}
	rg, err := slots.ParseSpec(*spec)
	if err != nil {
		return fmt.Errorf("-slots: %w", err)
	}
	layout, err := slotmove.ReadLayout(*layoutFile)
	if err != nil {
		return err
	}
	src, err := layout.Shards(*from, getenv)
	if err != nil {
		return err
	}
	dst, err := layout.Shards(*to, getenv)
	if err != nil {
		return err
	}
	rep, err := slotmove.Move(ctx, slotmove.Config{
		MapFile: *mapFile, StateFile: *state, Range: rg, From: *from, To: *to,
		Source: src, Target: dst, Tables: strings.Split(*tables, ","),
		ChunkSlots: *chunk, Settle: *settle, ResetTarget: *reset, SkipJobs: *skipJobs, Logger: log,
	})
	if err != nil {
		return err
	}
	log.Info("slot move complete", "slots", rg.String(), "from", *from, "to", *to,
		"copied", fmt.Sprint(rep.Copied), "verified", fmt.Sprint(rep.Verified), "deleted", fmt.Sprint(rep.Deleted), "resumed", rep.Resumed,
		"jobs_moved", rep.JobsMoved, "jobs_duplicate", rep.JobsDuplicate, "jobs_left_running", rep.JobsLeftRunning)
	return nil
}
