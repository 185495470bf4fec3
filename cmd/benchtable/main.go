// Command benchtable reads `go test -bench` output on stdin and prints a
// markdown table of one group of benchmarks with its targets, computed from
// the medians of -count runs so that every ratio compares numbers from the
// same run.
//
//	go test -run '^$' -bench . -cpu=1,2 -benchmem -count=5 ./internal/admission |
//		go run ./cmd/benchtable admission
//
// The first argument names the table; each table knows which benchmarks it
// needs and which targets to check. benchtable exits 1 if the input reports
// a failure or lacks a benchmark a target needs, and, with -strict, if a
// target is missed (benchmarks on shared machines are noisy, so a miss is
// reported, not fatal, by default).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// key identifies one benchmark at one GOMAXPROCS.
type key struct {
	name string // without the -N suffix
	cpu  int
}

// results holds every sample of every metric, by benchmark and unit.
type results struct {
	samples map[key]map[string][]float64
	order   []key
	failed  []string
}

var (
	benchLine = regexp.MustCompile(`^(Benchmark\S+)\s+(\d+)\s+(.+)$`)
	cpuSuffix = regexp.MustCompile(`^(.*)-(\d+)$`)
)

// parse reads benchmark output. A name without a -N suffix ran at
// GOMAXPROCS=1 (the testing package omits the suffix then).
func parse(r io.Reader) (*results, error) {
	res := &results{samples: map[key]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "panic:") {
			res.failed = append(res.failed, line)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		k := key{name: m[1], cpu: 1}
		if c := cpuSuffix.FindStringSubmatch(m[1]); c != nil {
			n, _ := strconv.Atoi(c[2])
			k = key{name: c[1], cpu: n}
		}
		fields := strings.Fields(m[3])
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("malformed benchmark line: %q", line)
		}
		if res.samples[k] == nil {
			res.samples[k] = map[string][]float64{}
			res.order = append(res.order, k)
		}
		for i := 0; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("malformed value %q in %q", fields[i], line)
			}
			res.samples[k][fields[i+1]] = append(res.samples[k][fields[i+1]], v)
		}
	}
	return res, sc.Err()
}

// median returns the median sample of unit for k, and whether there is one.
func (r *results) median(name string, cpu int, unit string) (float64, bool) {
	s := r.samples[key{name, cpu}][unit]
	if len(s) == 0 {
		return 0, false
	}
	s = slices.Clone(s)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// target is one checked goal.
type target struct {
	what   string
	value  float64
	goal   string
	ok     bool
	format string
}

// table renders one group.
type table func(w io.Writer, r *results) (missed, missing int)

var tables = map[string]table{
	"admission": admissionTable,
}

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchtable [-strict] TABLE < bench-output\ntables: %s\n", strings.Join(tableNames(), ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || tables[flag.Arg(0)] == nil {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Arg(0), os.Stdin, os.Stdout, *strict))
}

func tableNames() []string { return slices.Sorted(maps.Keys(tables)) }

// run renders the named table and returns the exit code.
func run(name string, in io.Reader, out io.Writer, strict bool) int {
	r, err := parse(in)
	if err != nil {
		fmt.Fprintln(out, "benchtable:", err)
		return 1
	}
	missed, missing := tables[name](out, r)
	code := 0
	if len(r.failed) > 0 {
		fmt.Fprintf(out, "\nbenchmark run reported failures:\n")
		for _, f := range r.failed {
			fmt.Fprintf(out, "    %s\n", f)
		}
		code = 1
	}
	if missing > 0 {
		code = 1
	}
	if strict && missed > 0 {
		code = 1
	}
	return code
}

const (
	hot    = "BenchmarkAdmitHotAccount/"
	many   = "BenchmarkAdmitManyAccounts/"
	memory = "BenchmarkAccountMemory/"
	kb     = 1024.0
)

func admissionTable(w io.Writer, r *results) (missed, missing int) {
	var rows []key
	for _, k := range r.order {
		if strings.HasPrefix(k.name, hot) || strings.HasPrefix(k.name, many) || strings.HasPrefix(k.name, memory) {
			rows = append(rows, k)
		}
	}
	fmt.Fprintln(w, "## Admission benchmarks (medians)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| benchmark | cpu | runs | ns/op | B/op | allocs/op | B/account |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, k := range rows {
		cell := func(unit, format string) string {
			if v, ok := r.median(k.name, k.cpu, unit); ok {
				return fmt.Sprintf(format, v)
			}
			return "–"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s |\n", strings.TrimPrefix(k.name, "Benchmark"), k.cpu,
			len(r.samples[k]["ns/op"]), cell("ns/op", "%.1f"), cell("B/op", "%.0f"), cell("allocs/op", "%.0f"), cell("B/account", "%.0f"))
	}

	var targets []target
	need := func(name string, cpu int, unit string) (float64, bool) {
		v, ok := r.median(name, cpu, unit)
		if !ok {
			missing++
			targets = append(targets, target{what: fmt.Sprintf("%s at cpu=%d (%s)", strings.TrimPrefix(name, "Benchmark"), cpu, unit), goal: "present"})
		}
		return v, ok
	}
	ratio := func(what, num, den string, cpu int, limit float64) {
		n, ok1 := need(num, cpu, "ns/op")
		d, ok2 := need(den, cpu, "ns/op")
		if ok1 && ok2 && d > 0 {
			targets = append(targets, target{what: what, value: n / d, goal: fmt.Sprintf("≤ %.2f", limit), ok: n/d <= limit, format: "%.3f"})
		}
	}
	ratio("sharded / peer ns/op, hot account, cpu=2", hot+"sharded", hot+"peer", 2, 0.35)
	ratio("sharded / single ns/op, hot account, cpu=2", hot+"sharded", hot+"single", 2, 0.5)

	// Every admit benchmark of the engine allocates nothing (the peer is a
	// baseline and is not held to it).
	worst, worstName, admitRows := 0.0, "", 0
	for _, k := range rows {
		if strings.HasPrefix(k.name, memory) || strings.HasSuffix(k.name, "/peer") {
			continue
		}
		if v, ok := r.median(k.name, k.cpu, "allocs/op"); ok {
			admitRows++
			if v > worst || worstName == "" {
				worst, worstName = v, fmt.Sprintf("%s-%d", strings.TrimPrefix(k.name, "Benchmark"), k.cpu)
			}
		}
	}
	if admitRows == 0 {
		missing++
		targets = append(targets, target{what: "allocs/op of admit benchmarks (run with -benchmem)", goal: "present"})
	} else {
		targets = append(targets, target{what: fmt.Sprintf("max allocs/op over %d admit benchmarks (%s)", admitRows, worstName), value: worst, goal: "= 0", ok: worst == 0, format: "%.0f"})
	}

	for _, m := range []struct {
		shards int
		limit  float64
	}{{1, 1.0 * kb}, {8, 3.6 * kb}, {16, 6.5 * kb}} {
		name := fmt.Sprintf("%sshards=%d", memory, m.shards)
		// Memory does not depend on GOMAXPROCS: hold the worst cpu setting.
		worst, found := 0.0, false
		for _, k := range rows {
			if k.name == name {
				if v, ok := r.median(k.name, k.cpu, "B/account"); ok {
					worst, found = max(worst, v), true
				}
			}
		}
		if !found {
			need(name, 1, "B/account")
			continue
		}
		targets = append(targets, target{what: fmt.Sprintf("retained bytes per account, shards=%d", m.shards), value: worst,
			goal: fmt.Sprintf("≤ %.0f (%.1f KB)", m.limit, m.limit/kb), ok: worst <= m.limit, format: "%.0f"})
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | value | goal | result |")
	fmt.Fprintln(w, "|---|---:|---|---|")
	for _, t := range targets {
		value, result := "–", "MISSING"
		if t.format != "" {
			value = fmt.Sprintf(t.format, t.value)
			result = "PASS"
			if !t.ok {
				result = "MISS"
				missed++
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.what, value, t.goal, result)
	}

	// Ratios without a target, for the reader: how each layout compares
	// with the peer and with SINGLE at every cpu setting.
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Same-run ratios (ns/op)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| group | cpu | sharded/single | sharded/peer | single/peer |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	cpus := map[int]bool{}
	for _, k := range rows {
		cpus[k.cpu] = true
	}
	for _, g := range []string{hot, many} {
		for _, c := range slices.Sorted(maps.Keys(cpus)) {
			sh, ok1 := r.median(g+"sharded", c, "ns/op")
			si, ok2 := r.median(g+"single", c, "ns/op")
			pe, ok3 := r.median(g+"peer", c, "ns/op")
			if !ok1 && !ok2 && !ok3 {
				continue
			}
			q := func(a, b float64, ok bool) string {
				if !ok || b == 0 {
					return "–"
				}
				return fmt.Sprintf("%.3f", a/b)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", strings.TrimSuffix(strings.TrimPrefix(g, "Benchmark"), "/"), c,
				q(sh, si, ok1 && ok2), q(sh, pe, ok1 && ok3), q(si, pe, ok2 && ok3))
		}
	}
	return missed, missing
}
