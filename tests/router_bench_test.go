package tests

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// Router overhead benchmark settings.
const (
	// benchPath is the spec's public GET /: the real cell's middleware
	// chain and an Echo JSON answer, without a database round trip, so the
	// router's share of the work is not hidden behind PostgreSQL.
	benchPath   = "/"
	benchTenant = "bench-tenant" // sent on both paths: the router routes on it
	benchConc   = 32             // concurrency of the throughput bursts
	// Interleaved comparison of /routed: rounds of a c1 block and a c32
	// burst on each path (direct, relay, routed), rotating which path
	// goes first, so all see the same load from the machine's other work;
	// a multiple of 3, so each path is in each position equally often.
	benchRounds      = 9
	benchLatencyReqs = 300  // c1 requests per path per round
	benchBurstReqs   = 2000 // c32 requests per path per round
)

// BenchmarkRouterOverhead measures what the router adds on loopback in
// front of a real cell (cmd/server on its own databases) serving benchPath.
// The load generator (this process), the router and the cell are three
// processes sharing the machine's cores. Every path uses the same client
// settings, path and tenant header; only the URL differs.
//
// Any proxy process costs a hop: the request and the answer each wake one
// more process, and what a wake-up costs depends on the host (a VM whose
// idle vCPUs halt pays far more than bare metal). So the router is also
// compared with a bare TCP relay (this test binary re-executed, see
// serveRelay: accept, dial the cell, copy bytes both ways), the floor of
// any proxy process on the same machine in the same run.
//
// /direct: ns/op is the mean latency of b.N requests one at a time to the
// cell; p50-us their median; c32-req/s the throughput of an untimed burst
// at concurrency 32. /relay: ns/op is the same through the relay.
//
// /routed: ns/op and the timed loop are the same through the router. Then,
// untimed, direct, relay and routed are measured interleaved (benchRounds
// rounds of a c1 block and a c32 burst on each, rotating which goes first)
// and compared:
//
//   - p50-us, p50-direct-us: the routed and direct c1 medians;
//   - p50-added-us: routed minus direct, what a client sees the router add
//     (issue target ≤ 60, which only a host with cheap wake-ups can meet);
//   - relay-added-us: relay minus direct, the hop alone;
//   - router-over-relay-us: p50-added-us minus relay-added-us, what the
//     router costs beyond the unavoidable hop (parsing, routing, headers,
//     its goroutine hand-offs): the part the router's code decides;
//   - c32-req/s, c32-ratio: routed burst throughput and routed/direct
//     (target ≥ 0.55); relay-c32-ratio: relay/direct, the hop's ceiling;
//   - c32-over-relay: routed/relay throughput, which is c32-ratio over
//     relay-c32-ratio of the same rounds (target ≥ 0.60);
//   - router-cpu-us/req, relay-cpu-us/req: CPU time (user and system, all
//     threads, from /proc) of the router and the relay per request of
//     their own c32 bursts; router-ctxsw/req, relay-ctxsw/req: their
//     context switches per request, the thread sleeps and wake-ups a hop
//     costs (Linux only).
//
// The router runs with the spec's per-tenant cap (the router block's
// max_in_flight_per_tenant): after the rounds the benchmark reads the
// router's /metrics and fails unless its admission engine admitted every
// request sent through it.
func BenchmarkRouterOverhead(b *testing.B) {
	cell := startCell(b, cellEnv(b))
	cell.waitStatus(b, "/readyz", 200, 60*time.Second)
	mapFile := filepath.Join(b.TempDir(), "slotmap.json")
	if err := cells.WriteSlotMap(mapFile, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: cell.url}}}); err != nil {
		b.Fatal(err)
	}
	router := startRouter(b, mapFile)
	relay := startRelay(b, strings.TrimPrefix(cell.url, "http://"))
	direct := newBenchTarget(b, cell.url+benchPath, nil)
	relayed := newBenchTarget(b, relay.url+benchPath, relay)
	routed := newBenchTarget(b, router.url+benchPath, router)

	b.Run("direct", func(b *testing.B) {
		lat := direct.timedLoop(b)
		b.ReportMetric(us(benchMedian(lat)), "p50-us")
		b.ReportMetric(direct.burst(b, benchBurstReqs), "c32-req/s")
	})
	b.Run("relay", func(b *testing.B) {
		lat := relayed.timedLoop(b)
		b.ReportMetric(us(benchMedian(lat)), "p50-us")
	})
	b.Run("routed", func(b *testing.B) {
		routed.timedLoop(b)
		l := benchInterleaved(b, direct, relayed, routed)
		d, y, r := l[0], l[1], l[2]
		// The per-tenant cap must be on: the router's admission engine
		// admitted every request sent through it.
		routed.checkAdmitted(b)
		b.ReportMetric(us(r.p50), "p50-us")
		b.ReportMetric(us(d.p50), "p50-direct-us")
		b.ReportMetric(us(r.p50-d.p50), "p50-added-us")
		b.ReportMetric(us(y.p50-d.p50), "relay-added-us")
		b.ReportMetric(us(r.p50-y.p50), "router-over-relay-us")
		b.ReportMetric(r.throughput, "c32-req/s")
		b.ReportMetric(r.throughput/d.throughput, "c32-ratio")
		b.ReportMetric(y.throughput/d.throughput, "relay-c32-ratio")
		b.ReportMetric(r.throughput/y.throughput, "c32-over-relay")
		if r.cpu > 0 && y.cpu > 0 {
			b.ReportMetric(us(r.cpu), "router-cpu-us/req")
			b.ReportMetric(us(y.cpu), "relay-cpu-us/req")
			b.ReportMetric(r.switches, "router-ctxsw/req")
			b.ReportMetric(y.switches, "relay-ctxsw/req")
		}
	})
}

// benchLoad is one path's measurements in an interleaved comparison.
type benchLoad struct {
	p50        time.Duration // median latency at concurrency 1
	throughput float64       // requests/s at concurrency benchConc
	// For a path through a process of its own (relay, router): that
	// process's CPU time and context switches per request of the c32
	// bursts, from /proc (0 where /proc cannot be read).
	cpu      time.Duration
	switches float64
}

// benchInterleaved measures targets in benchRounds rounds, each a c1 block
// and a c32 burst per target, rotating which target goes first, and
// returns their loads in the order given.
func benchInterleaved(b *testing.B, targets ...*benchTarget) []benchLoad {
	n := len(targets)
	lat := make([][]time.Duration, n)
	took := make([]time.Duration, n)
	usage := make([]procUsage, n)
	for round := range benchRounds {
		for k := range n {
			i := (round + k) % n
			lat[i] = append(lat[i], targets[i].latencies(b, benchLatencyReqs)...)
			before := targets[i].usage()
			start := time.Now()
			targets[i].burstN(b, benchBurstReqs)
			took[i] += time.Since(start)
			usage[i] = usage[i].add(targets[i].usage().sub(before))
		}
	}
	loads := make([]benchLoad, n)
	reqs := float64(benchRounds * benchBurstReqs)
	for i := range loads {
		loads[i] = benchLoad{p50: benchMedian(lat[i]), throughput: reqs / took[i].Seconds(),
			cpu: time.Duration(float64(usage[i].cpu) / reqs), switches: float64(usage[i].switches) / reqs}
	}
	return loads
}

// procUsage is a process's CPU time and context switches so far, all
// threads together.
type procUsage struct {
	cpu      time.Duration
	switches int64
}

func (u procUsage) add(v procUsage) procUsage {
	return procUsage{u.cpu + v.cpu, u.switches + v.switches}
}
func (u procUsage) sub(v procUsage) procUsage {
	return procUsage{u.cpu - v.cpu, u.switches - v.switches}
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// readProcUsage reads a process's usage from /proc: utime and stime of
// /proc/<pid>/stat, and the context switches of each of its threads. It
// returns the zero usage where /proc cannot be read (not Linux).
func readProcUsage(pid int) procUsage {
	var u procUsage
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): utime and stime are the 14th and 15th of the line.
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return u
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(ut+st) * clockTick
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(raw)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.switches += n
			}
		}
	}
	return u
}

// benchTarget is one URL with its own clients: one warm connection for the
// c1 requests and benchConc warm connections for the bursts.
type benchTarget struct {
	url       string
	one, many *http.Client
	proc      *cell        // the process in front of the cell (relay, router); nil for the cell itself
	sent      atomic.Int64 // requests sent
}

func newBenchTarget(b *testing.B, url string, proc *cell) *benchTarget {
	t := &benchTarget{url: url, one: benchHTTPClient(), many: benchHTTPClient(), proc: proc}
	t.get(b)
	t.burstN(b, benchConc) // opens benchConc connections
	return t
}

// usage is the target's own process's usage so far, zero for the cell.
func (t *benchTarget) usage() procUsage {
	if t.proc == nil {
		return procUsage{}
	}
	return readProcUsage(t.proc.cmd.Process.Pid)
}

// checkAdmitted fails unless the router's per-tenant cap saw every
// request sent to it: its admission engine's admitted count (from the
// router's /metrics) equals the requests this target sent. So the figures
// are those of a router with its per-tenant cap on.
func (t *benchTarget) checkAdmitted(b *testing.B) {
	resp, err := http.Get(t.proc.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	const series = `cellgate_admission_outcomes_total{engine="router",outcome="admitted"} `
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, series); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatalf("%s: %q: %v", t.proc.url, line, err)
			}
			if sent := t.sent.Load(); int64(n) != sent {
				b.Fatalf("%s: the per-tenant cap admitted %d requests of %d sent", t.proc.url, int64(n), sent)
			}
			return
		}
	}
	b.Fatalf("%s/metrics has no %s: is the per-tenant cap on?", t.proc.url, strings.TrimSpace(series))
}

// benchHTTPClient keeps more idle connections per host than the burst has
// workers, so no request of a burst dials (the default keeps 2).
func benchHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        2 * benchConc,
		MaxIdleConnsPerHost: 2 * benchConc,
		DisableCompression:  true,
	}}
}

// timedLoop sends b.N requests one at a time inside the benchmark timer and
// returns their latencies.
func (t *benchTarget) timedLoop(b *testing.B) []time.Duration {
	b.ReportAllocs()
	lat := make([]time.Duration, b.N) // outside the timer: not the router's
	b.ResetTimer()
	t.timeEach(b, lat)
	b.StopTimer()
	return lat
}

// latencies sends n requests one at a time and returns their latencies.
func (t *benchTarget) latencies(b *testing.B, n int) []time.Duration {
	lat := make([]time.Duration, n)
	t.timeEach(b, lat)
	return lat
}

// timeEach sends len(lat) requests one after another, each's latency into lat.
func (t *benchTarget) timeEach(b *testing.B, lat []time.Duration) {
	for i := range lat {
		t0 := time.Now()
		t.get(b)
		lat[i] = time.Since(t0)
	}
}

// burst sends n requests from benchConc goroutines and returns requests
// per second.
func (t *benchTarget) burst(b *testing.B, n int) float64 {
	start := time.Now()
	t.burstN(b, n)
	return float64(n) / time.Since(start).Seconds()
}

func (t *benchTarget) burstN(b *testing.B, n int) {
	var wg sync.WaitGroup
	var failed atomic.Value
	var left atomic.Int64
	left.Store(int64(n))
	for range benchConc {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := t.try(t.many); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// get sends one request on the c1 client.
func (t *benchTarget) get(b *testing.B) {
	if err := t.try(t.one); err != nil {
		b.Fatal(err)
	}
}

// try sends one request on c, counted in sent.
func (t *benchTarget) try(c *http.Client) error {
	t.sent.Add(1)
	return benchTry(c, t.url)
}

// benchTry sends one GET with the tenant header, drains and closes the
// body (so the connection goes back to the pool) and checks for a 200.
func benchTry(c *http.Client, url string) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Tenant-ID", benchTenant)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

func benchMedian(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
