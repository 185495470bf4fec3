package tests

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
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
	// burst on each path, alternating which path goes first, so both see
	// the same load from the machine's other work.
	benchRounds      = 8
	benchLatencyReqs = 300  // c1 requests per path per round
	benchBurstReqs   = 2000 // c32 requests per path per round
)

// BenchmarkRouterOverhead measures what the router adds on loopback in
// front of a real cell (cmd/server on its own databases) serving benchPath.
// The load generator (this process), the router and the cell are three
// processes sharing the machine's cores. Both paths use the same client
// settings, path and tenant header; only the URL differs.
//
// /direct: ns/op is the mean latency of b.N requests one at a time to the
// cell; p50-us their median; c32-req/s the throughput of an untimed burst
// at concurrency 32.
//
// /routed: ns/op and the timed loop are the same through the router. Then,
// untimed, direct and routed are measured interleaved (benchRounds rounds,
// alternating order) and compared: p50-us and p50-direct-us are their c1
// medians, p50-added-us the difference, c32-req/s the routed burst
// throughput and c32-ratio routed/direct. Targets: p50-added-us ≤ 60,
// c32-ratio ≥ 0.55.
func BenchmarkRouterOverhead(b *testing.B) {
	cell := startCell(b, cellEnv(b))
	cell.waitStatus(b, "/readyz", 200, 60*time.Second)
	mapFile := filepath.Join(b.TempDir(), "slotmap.json")
	if err := cells.WriteSlotMap(mapFile, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: cell.url}}}); err != nil {
		b.Fatal(err)
	}
	router := startRouter(b, mapFile)
	direct, routed := newBenchTarget(b, cell.url+benchPath), newBenchTarget(b, router.url+benchPath)

	b.Run("direct", func(b *testing.B) {
		lat := direct.timedLoop(b)
		b.ReportMetric(us(benchMedian(lat)), "p50-us")
		b.ReportMetric(direct.burst(b, benchBurstReqs), "c32-req/s")
	})
	b.Run("routed", func(b *testing.B) {
		routed.timedLoop(b)
		d, r := benchInterleaved(b, direct, routed)
		b.ReportMetric(us(r.p50), "p50-us")
		b.ReportMetric(us(d.p50), "p50-direct-us")
		b.ReportMetric(us(r.p50-d.p50), "p50-added-us")
		b.ReportMetric(r.throughput, "c32-req/s")
		b.ReportMetric(r.throughput/d.throughput, "c32-ratio")
	})
}

// benchLoad is one path's measurements in an interleaved comparison.
type benchLoad struct {
	p50        time.Duration // median latency at concurrency 1
	throughput float64       // requests/s at concurrency benchConc
}

// benchInterleaved measures two targets in benchRounds rounds, each a c1
// block and a c32 burst per target, alternating which target goes first.
func benchInterleaved(b *testing.B, x, y *benchTarget) (benchLoad, benchLoad) {
	var lat [2][]time.Duration
	var took [2]time.Duration
	targets := [2]*benchTarget{x, y}
	for round := range benchRounds {
		for k := range 2 {
			i := (round + k) % 2
			lat[i] = append(lat[i], targets[i].latencies(b, benchLatencyReqs)...)
			start := time.Now()
			targets[i].burstN(b, benchBurstReqs)
			took[i] += time.Since(start)
		}
	}
	load := func(i int) benchLoad {
		return benchLoad{p50: benchMedian(lat[i]), throughput: float64(benchRounds*benchBurstReqs) / took[i].Seconds()}
	}
	return load(0), load(1)
}

// benchTarget is one URL with its own clients: one warm connection for the
// c1 requests and benchConc warm connections for the bursts.
type benchTarget struct {
	url       string
	one, many *http.Client
}

func newBenchTarget(b *testing.B, url string) *benchTarget {
	t := &benchTarget{url: url, one: benchHTTPClient(), many: benchHTTPClient()}
	t.get(b, t.one)
	t.burstN(b, benchConc) // opens benchConc connections
	return t
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
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		t.get(b, t.one)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	return lat
}

// latencies sends n requests one at a time and returns their latencies.
func (t *benchTarget) latencies(b *testing.B, n int) []time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		t0 := time.Now()
		t.get(b, t.one)
		lat[i] = time.Since(t0)
	}
	return lat
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
				if err := benchTry(t.many, t.url); err != nil {
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

func (t *benchTarget) get(b *testing.B, c *http.Client) {
	if err := benchTry(c, t.url); err != nil {
		b.Fatal(err)
	}
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
