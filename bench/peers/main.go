// Command peers runs the side-by-side benchmarks of cellgate's PostgreSQL
// job backend and River (riverpgxv5) on one PostgreSQL server, each in a
// database of its own that it creates and drops: the shapes bulk, tx and
// noisy (docs/benchmarks.md), alternating the sides, for -rounds rounds,
// and prints the medians, one line per shape:
//
//	peers: SHAPE cellgate=<value> river=<value> cellgate/river=<ratio>
//
// (for the noisy shape's wait, river/cellgate), and what each side's
// PostgreSQL backends and this process spent per job. A round in which a
// side stalled is flagged (peers-stalled lines, stalled= on the median
// line) and a peers-healthy line gives the medians without such rounds. It is one process
// driving one side at a time; nothing in it is safe for concurrent use
// beyond what each shape starts itself.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

func main() {
	st := settings{
		bulkBatch:  5000,
		bulkMin:    75000,
		txProd:     64,
		txMax:      2000,
		tenants:    100,
		noisyJobs:  100000,
		quiet:      20,
		quietEvery: 100 * time.Millisecond,
	}
	dsn := flag.String("pg", cmp.Or(os.Getenv("CELLGATE_TEST_PG"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"the PostgreSQL server (a DSN to a database the benchmark can CREATE DATABASE from)")
	rounds := flag.Int("rounds", 3, "rounds; each shape prints the median")
	shapes := flag.String("shapes", "bulk,tx,noisy", "the shapes to run, comma-separated")
	flag.IntVar(&st.workers, "workers", 2000, "workers per side (River's benchmark runs 2,000)")
	flag.DurationVar(&st.window, "window", 10*time.Second, "measured window of the bulk and tx shapes")
	conns := flag.Int("conns", 8, "connections of each side's job system")
	appConns := flag.Int("app-conns", 16, "connections of each side's application pool (the tx shape's transactions)")
	var cgCfg pgjobs.Config
	flag.IntVar(&cgCfg.Prefetch, "cellgate-prefetch", 0, "the cellgate side's pgjobs Config.Prefetch (0: the default, one per worker; -1: off)")
	flag.IntVar(&cgCfg.ClaimBatch, "cellgate-claim-batch", 0, "the cellgate side's pgjobs Config.ClaimBatch (0: the default)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("peers: ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dsn, *rounds, strings.Split(*shapes, ","), st, cgCfg, int32(*conns), int32(*appConns)); err != nil {
		log.Fatal(err)
	}
}

type shape struct {
	name string
	run  func(context.Context, side, settings) (result, error)
	// wait: the value is a wait (lower is better), the ratio river/cellgate.
	wait bool
}

var allShapes = []shape{
	{"bulk", runBulk, false},
	{"tx", runTx, false},
	{"noisy", runNoisy, true},
}

func run(ctx context.Context, adminDSN string, rounds int, names []string, st settings, cgCfg pgjobs.Config, conns, appConns int32) (err error) {
	var todo []shape
	for _, n := range names {
		i := slices.IndexFunc(allShapes, func(s shape) bool { return s.name == n })
		if i < 0 {
			return fmt.Errorf("unknown shape %q (want bulk, tx or noisy)", n)
		}
		todo = append(todo, allShapes[i])
	}
	if rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	cleanup := context.WithoutCancel(ctx)
	cgName, cgDSN, err := createDB(ctx, adminDSN, "peers_cellgate")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropDB(cleanup, adminDSN, cgName)) }()
	rvName, rvDSN, err := createDB(ctx, adminDSN, "peers_river")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropDB(cleanup, adminDSN, rvName)) }()
	cg, err := newCellgate(ctx, cgDSN, cgCfg, conns, appConns)
	if err != nil {
		return err
	}
	defer cg.close()
	rv, err := newRiver(ctx, rvDSN, conns, appConns)
	if err != nil {
		return err
	}
	defer rv.close()
	sides := []side{cg, rv}

	fmt.Printf("peers: workers=%d window=%s rounds=%d conns=%d app-conns=%d cellgate-prefetch=%d cellgate-claim-batch=%d\n", st.workers, st.window, rounds, conns, appConns, cgCfg.Prefetch, cgCfg.ClaimBatch)
	for _, sh := range todo {
		var res [2][]result
		for r := range rounds {
			// Alternate which side goes first.
			for k := range 2 {
				i := (k + r) % 2
				if err := sides[i].Reset(ctx); err != nil {
					return fmt.Errorf("%s: reset: %w", sides[i].Name(), err)
				}
				out, err := sh.run(ctx, sides[i], st)
				if err != nil && ctx.Err() == nil {
					// The server is shared: another client may have taken
					// its last connection. One more try, on a clean table.
					fmt.Printf("peers-retry: %s round %d %s: %v\n", sh.name, r+1, sides[i].Name(), err)
					if err = sides[i].Reset(ctx); err == nil {
						out, err = sh.run(ctx, sides[i], st)
					}
				}
				if err != nil {
					return fmt.Errorf("%s round %d: %w", sh.name, r+1, err)
				}
				res[i] = append(res[i], out)
				fmt.Printf("peers-round: %s %d %s=%.1f jobs=%d\n", sh.name, r+1, sides[i].Name(), out.value, out.jobs)
			}
		}
		stalled := [2][]int{stalls(sh, res[0]), stalls(sh, res[1])}
		report(sh, res[0], res[1], stallMark(sh, sides, res, stalled))
		if len(stalled[0])+len(stalled[1]) > 0 {
			reportHealthy(sh, res, stalled)
		}
	}
	return nil
}

// stallMark prints a peers-stalled line for each stalled round and returns
// what ends the shape's median line: each side's stalled rounds, or "".
func stallMark(sh shape, sides []side, res [2][]result, stalled [2][]int) string {
	var mark string
	for i := range sides {
		if len(stalled[i]) == 0 {
			continue
		}
		var ks []string
		for _, k := range stalled[i] {
			fmt.Printf("peers-stalled: %s %s round %d: %s\n", sh.name, sides[i].Name(), k+1, res[i][k].stall)
			ks = append(ks, fmt.Sprint(k+1))
		}
		mark += fmt.Sprintf(" stalled=%s:%s", sides[i].Name(), strings.Join(ks, ","))
	}
	return mark
}

// reportHealthy prints the medians without the stalled rounds. The median
// line stands on stalled rounds too; this one on the others only, so both
// are in the output, and neither silently.
func reportHealthy(sh shape, res [2][]result, stalled [2][]int) {
	fmt.Printf("peers-note: %s: a side stalled in %d of its rounds; the median over the other rounds:\n", sh.name, max(len(stalled[0]), len(stalled[1])))
	ok := [2][]result{healthy(res[0], stalled[0]), healthy(res[1], stalled[1])}
	if len(ok[0]) == 0 || len(ok[1]) == 0 {
		fmt.Printf("peers-healthy: %s none: every round of a side stalled\n", sh.name)
		return
	}
	mc, mr := median(ok[0]), median(ok[1])
	fmt.Printf("peers-healthy: %s cellgate=%.1f river=%.1f %s rounds=%d,%d\n", sh.name, mc.value, mr.value, ratioText(sh, mc, mr), len(ok[0]), len(ok[1]))
}

// healthy returns rs without the rounds at the indexes in bad.
func healthy(rs []result, bad []int) []result {
	var out []result
	for k, r := range rs {
		if !slices.Contains(bad, k) {
			out = append(out, r)
		}
	}
	return out
}

// stalls returns the indexes of a side's stalled rounds of one shape, and
// fills in their result.stall: those whose phase stalled for a second
// (pace), and, for the throughput shapes, those that ran at less than a
// quarter of the side's best round, the bimodal signature of a side that
// ran on a bad plan for a whole round.
func stalls(sh shape, rs []result) []int {
	var best float64
	for _, r := range rs {
		best = max(best, r.value)
	}
	var out []int
	for k := range rs {
		r := &rs[k]
		if r.stall == "" && !sh.wait && r.value < best/4 {
			r.stall = fmt.Sprintf("%.1f jobs/s, under a quarter of its best round's %.1f", r.value, best)
		}
		if r.stall != "" {
			out = append(out, k)
		}
	}
	return out
}

// report prints a shape's median line and each side's cost per job.
// A non-empty mark (the stalled rounds) ends the median line.
func report(sh shape, cg, rv []result, mark string) {
	mc, mr := median(cg), median(rv)
	unit, ratio := "jobs/s", ratioText(sh, mc, mr)
	if sh.wait {
		unit = "ms p99 quiet wait"
	}
	fmt.Printf("peers: %s cellgate=%.1f river=%.1f %s%s\n", sh.name, mc.value, mr.value, ratio, mark)
	fmt.Printf("peers-unit: %s %s\n", sh.name, unit)
	for _, s := range []struct {
		name string
		r    result
	}{{"cellgate", mc}, {"river", mr}} {
		j := float64(max(s.r.jobs, 1))
		u := s.r.use
		fmt.Printf("peers-cpu: %s %s pg-µs/job=%.1f go-µs/job=%.1f xacts/job=%.3f blocks/job=%.1f tuple-writes/job=%.2f\n",
			sh.name, s.name, float64(u.pgCPU.Microseconds())/j, float64(u.goCPU.Microseconds())/j,
			float64(u.xacts)/j, float64(u.blocks)/j, float64(u.tupWrites)/j)
		if s.r.detail != "" {
			fmt.Printf("peers-detail: %s %s %s\n", sh.name, s.name, s.r.detail)
		}
	}
}

// ratioText is the shape's ratio of the two medians, ours first where
// higher is better for us: cellgate/river for a rate, river/cellgate for
// a wait.
func ratioText(sh shape, cg, rv result) string {
	if sh.wait {
		return fmt.Sprintf("river/cellgate=%.1f", rv.value/cg.value)
	}
	return fmt.Sprintf("cellgate/river=%.2f", cg.value/rv.value)
}

// median returns the round with the median value (the lower middle one for
// an even count), whose costs are reported with it.
func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int { return cmp.Compare(a.value, b.value) })
	return s[(len(s)-1)/2]
}
