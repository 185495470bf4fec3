package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// benchLoad is one side's measurements.
type benchLoad struct {
	p50        time.Duration // latency at concurrency 1
	throughput float64       // requests/s at concurrency 32
}

// directBaseline is BenchmarkRouterOverhead/direct's result, for /routed
// in the same run.
var directBaseline *benchLoad

// benchUpstreamEnv makes the test binary a trivial upstream server: the
// benchmark runs its upstream as a separate process so that /direct, like
// /routed, crosses a process boundary and the difference is the router's.
const benchUpstreamEnv = "CELLGATE_BENCH_UPSTREAM"

func init() {
	addr := os.Getenv(benchUpstreamEnv)
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	os.Exit(0)
}

// startUpstream runs the test binary in upstream mode on a free port.
func startUpstream(b *testing.B) string {
	addr := freeAddr(b)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchUpstreamEnv+"="+addr)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			b.Fatalf("upstream on %s did not start: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkRouterOverhead measures what the router adds on loopback. The
// upstream is trivial (not the example cell): this test binary re-run as a
// plain net/http server answering 200 with a 2-byte body, in its own
// process. /direct talks to it; /routed to the router binary routing to
// it. Load generator, router and upstream are three processes sharing the
// machine's cores.
//
// Each sub-benchmark sends b.N requests one at a time (ns/op is the mean
// latency at concurrency 1; p50-us its median), then, untimed, a burst at
// concurrency 32 (c32-req/s). /routed also reports p50-added-us (routed
// minus direct p50) and c32-ratio (routed / direct throughput), measured
// against /direct of the same run. Targets: p50-added-us ≤ 60,
// c32-ratio ≥ 0.55.
func BenchmarkRouterOverhead(b *testing.B) {
	upstream := startUpstream(b)
	mapFile := filepath.Join(b.TempDir(), "slotmap.json")
	if err := cells.WriteSlotMap(mapFile, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: upstream}}}); err != nil {
		b.Fatal(err)
	}
	router := startRouter(b, mapFile)

	b.Run("direct", func(b *testing.B) {
		l := benchMeasure(b, upstream+"/x")
		directBaseline = &l
	})
	b.Run("routed", func(b *testing.B) {
		l := benchMeasure(b, router.url+"/x")
		base := directBaseline
		if base == nil { // run alone (-bench .../routed): measure the baseline now
			b.StopTimer()
			d := benchMeasureN(b, upstream+"/x", 2000)
			base = &d
		}
		b.ReportMetric(float64(l.p50-base.p50)/1e3, "p50-added-us")
		b.ReportMetric(l.throughput/base.throughput, "c32-ratio")
	})
}

func benchHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
}

func benchGet(b *testing.B, c *http.Client, url string) {
	if err := benchTry(c, url); err != nil {
		b.Fatal(err)
	}
}

func benchTry(c *http.Client, url string) error {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Tenant-ID", "bench-tenant")
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

func benchMeasure(b *testing.B, url string) benchLoad {
	b.ReportAllocs()
	c := benchHTTPClient()
	benchGet(b, c, url) // warm the connection
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		benchGet(b, c, url)
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	l := benchLoad{p50: benchMedian(lat), throughput: benchThroughput(b, url, max(b.N, 2000))}
	b.ReportMetric(float64(l.p50)/1e3, "p50-us")
	b.ReportMetric(l.throughput, "c32-req/s")
	return l
}

// benchMeasureN is benchMeasure without a benchmark loop, for a missing baseline.
func benchMeasureN(b *testing.B, url string, n int) benchLoad {
	c := benchHTTPClient()
	benchGet(b, c, url)
	lat := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		benchGet(b, c, url)
		lat[i] = time.Since(t0)
	}
	return benchLoad{p50: benchMedian(lat), throughput: benchThroughput(b, url, n)}
}

// benchThroughput sends n requests from 32 goroutines over warm connections
// and returns requests per second.
func benchThroughput(b *testing.B, url string, n int) float64 {
	const conc = 32
	c := benchHTTPClient()
	var wg sync.WaitGroup
	var failed atomic.Value
	for range conc { // open the connections first
		wg.Go(func() {
			if err := benchTry(c, url); err != nil {
				failed.Store(err)
			}
		})
	}
	wg.Wait()
	var left atomic.Int64
	left.Store(int64(n))
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := benchTry(c, url); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

func benchMedian(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
