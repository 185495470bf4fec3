package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// noisyHandlerTime is how long the noisy-neighbour benchmark's handler
// takes (a timer, not CPU: the requests hold slots, not cores).
const noisyHandlerTime = 100 * time.Millisecond

// noisyRetryPause is how long a noisy worker waits after a 503 before it
// sends again: as long as a request takes, so each of its 64 workers sends
// at the pace a served one would, and the tenant keeps asking for 64 slots.
// (It does not honour Retry-After: 1.) A client that retries with no pause
// turns a concurrency problem into a CPU one — a retry storm of 503s,
// which is the rate limit's job, not the bulkhead's.
const noisyRetryPause = noisyHandlerTime

// quietRetryPause is how long a quiet tenant waits before retrying a 503;
// its latency is measured from the first attempt to the success.
const quietRetryPause = 10 * time.Millisecond

// benchClient returns a keep-alive client for up to conns connections.
func benchClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: conns,
			MaxConnsPerHost:     conns,
			DialContext:         (&net.Dialer{KeepAlive: time.Minute}).DialContext,
		},
	}
}

// get sends one GET for tenant and drains the answer.
func get(client *http.Client, url, tenant string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Tenant-ID", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// quietResult is one quiet phase: every latency (first try to success)
// and the 503s the quiet tenants saw.
type quietResult struct {
	lat     []time.Duration
	refused int64
}

func (q quietResult) p99() time.Duration { return q.quantile(99) }

// quantile returns the p-th percentile (nearest rank).
func (q quietResult) quantile(p int) time.Duration {
	s := slices.Clone(q.lat)
	slices.Sort(s)
	return s[(len(s)*p+99)/100-1]
}

// runQuiet has 8 quiet tenants send perTenant sequential requests each.
func runQuiet(b *testing.B, url string, perTenant int) quietResult {
	var (
		mu  sync.Mutex
		res quietResult
		wg  sync.WaitGroup
	)
	for q := 0; q < 8; q++ {
		wg.Add(1)
		go func(q int) {
			defer wg.Done()
			client := benchClient(1)
			defer client.CloseIdleConnections()
			tenant := fmt.Sprintf("quiet-%d", q)
			for i := 0; i < perTenant; i++ {
				start := time.Now()
				for attempt := 0; ; attempt++ {
					code, err := get(client, url, tenant)
					if err != nil {
						b.Error(err)
						return
					}
					if code == http.StatusOK {
						break
					}
					if code != http.StatusServiceUnavailable || attempt == 200 {
						b.Errorf("quiet request: status %d after %d attempts", code, attempt+1)
						return
					}
					atomic.AddInt64(&res.refused, 1)
					time.Sleep(quietRetryPause)
				}
				mu.Lock()
				res.lat = append(res.lat, time.Since(start))
				mu.Unlock()
			}
		}(q)
	}
	wg.Wait()
	return res
}

// noisy keeps 64 requests of one tenant in flight until stop is closed and
// returns how many of its requests were refused.
func noisy(url string, stop <-chan struct{}) (wait func() (served, refused int64)) {
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	client := benchClient(64)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, err := get(client, url, "noisy")
				switch {
				case err != nil:
					time.Sleep(noisyRetryPause)
				case code == http.StatusOK:
					served.Add(1)
				default:
					refused.Add(1)
					time.Sleep(noisyRetryPause)
				}
			}
		}()
	}
	return func() (int64, int64) {
		wg.Wait()
		client.CloseIdleConnections()
		return served.Load(), refused.Load()
	}
}

// BenchmarkNoisyNeighbour: an in-process cell (runtime.Server on loopback,
// this file's 100 ms handler, no database) with
// server.max_concurrent_requests = 64. One noisy tenant keeps 64 requests
// in flight; 8 quiet tenants send sequential requests. Each run measures
// the quiet tenants alone and beside the noisy one (4 alternating rounds,
// 192 samples per side), with the tenant cap at 16 ("caps on") and with no
// tenant cap ("caps off"), and reports:
//
//	quiet-p99-ratio          quiet p99 beside the noisy tenant / quiet p99 alone, caps on (target ≤ 1.1)
//	quiet-503s               503s the quiet tenants saw beside the noisy one, caps on (target 0)
//	capsoff-quiet-p99-ratio  the same, tenant cap off
//	capsoff-quiet-503s       the same, tenant cap off
//	noisy-503s               the noisy tenant's refusals, caps on
//	quiet-p90-ratio, capsoff-quiet-p90-ratio
//	                         the same ratios at p90, which host noise moves less than p99
func BenchmarkNoisyNeighbour(b *testing.B) {
	b.ReportAllocs()
	handler := func(c echo.Context) error {
		select {
		case <-time.After(noisyHandlerTime):
		case <-c.Request().Context().Done():
			return c.Request().Context().Err()
		}
		return c.String(http.StatusOK, "ok")
	}
	start := func(tenantCap int) string {
		cfg := bhConfig(64, tenantCap, 0, 10*time.Second)
		cell := startInProcess(b, cfg, nil, func(s *runtime.Server) {
			s.Tenant("GET", "/work", func(c echo.Context, _ shards.Accessor) error { return handler(c) })
		})
		return cell.url + "/work"
	}
	on, off := start(16), start(0)
	// Alone and beside phases alternate in short rounds, so a burst of
	// load from elsewhere on the host is as likely to hit either side.
	const rounds, perTenant = 4, 6 // 192 quiet samples per side

	var sums [7]float64
	for b.Loop() {
		for i, url := range []string{on, off} {
			var alone, beside quietResult
			var noisyRefused int64
			for r := 0; r < rounds; r++ {
				a := runQuiet(b, url, perTenant)
				alone.lat = append(alone.lat, a.lat...)
				alone.refused += a.refused
				stop := make(chan struct{})
				wait := noisy(url, stop)
				time.Sleep(2 * noisyHandlerTime) // let the noisy tenant fill its slots
				q := runQuiet(b, url, perTenant)
				beside.lat = append(beside.lat, q.lat...)
				beside.refused += q.refused
				close(stop)
				_, refused := wait()
				noisyRefused += refused
			}
			if len(alone.lat) == 0 || len(beside.lat) == 0 {
				b.Fatal("no quiet samples")
			}
			sums[2*i] += float64(beside.p99()) / float64(alone.p99())
			sums[2*i+1] += float64(beside.refused)
			sums[5+i] += float64(beside.quantile(90)) / float64(alone.quantile(90))
			name := "caps on"
			if i == 0 {
				sums[4] += float64(noisyRefused)
			} else {
				name = "caps off"
			}
			b.Logf("%s: quiet p50/p90/p99 alone %s/%s/%s, beside the noisy tenant %s/%s/%s; quiet 503s %d, noisy 503s %d", name,
				alone.quantile(50).Round(time.Microsecond), alone.quantile(90).Round(time.Microsecond), alone.p99().Round(time.Microsecond),
				beside.quantile(50).Round(time.Microsecond), beside.quantile(90).Round(time.Microsecond), beside.p99().Round(time.Microsecond),
				beside.refused, noisyRefused)
		}
	}
	n := float64(b.N)
	b.ReportMetric(sums[0]/n, "quiet-p99-ratio")
	b.ReportMetric(sums[1]/n, "quiet-503s")
	b.ReportMetric(sums[2]/n, "capsoff-quiet-p99-ratio")
	b.ReportMetric(sums[3]/n, "capsoff-quiet-503s")
	b.ReportMetric(sums[4]/n, "noisy-503s")
	b.ReportMetric(sums[5]/n, "quiet-p90-ratio")
	b.ReportMetric(sums[6]/n, "capsoff-quiet-p90-ratio")
}

// overheadTarget is one server of BenchmarkMiddlewareOverhead.
type overheadTarget struct {
	url    string
	client *http.Client
}

// rate sends n requests over conc connections and returns requests/s.
func (o overheadTarget) rate(tb testing.TB, n, conc int) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if code, err := get(o.client, o.url, "acme"); err != nil || code != 200 {
					tb.Errorf("status %d, %v", code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// p50 sends n sequential requests and returns the median latency.
func (o overheadTarget) p50(tb testing.TB, n int) time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		if code, err := get(o.client, o.url, "acme"); err != nil || code != 200 {
			tb.Fatalf("status %d, %v", code, err)
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return lat[n/2]
}

const overheadConc = 16

// BenchmarkMiddlewareOverhead serves a trivial handler from bare Echo and
// from a runtime.Server with the full tenant chain (HTTP metrics, header
// tenancy, tenant bulkhead with request and database caps, server
// admission; plus the server's request id, recover, body limit and
// deadline), in the same process, driven by the same load generator over
// loopback. ns/op is per request at 16 connections; p50-us is the median
// at concurrency 1. /full also interleaves rounds against bare and
// reports throughput-vs-bare (wall clock; target ≥ 0.85),
// cpu-throughput-vs-bare (bare CPU per request / full CPU per request, the
// same ratio measured in CPU time, which host load disturbs less),
// cpu-added-us (CPU per request the chain adds) and p50-added-us (target
// ≤ 20).
func BenchmarkMiddlewareOverhead(b *testing.B) {
	trivial := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }

	cfg := bhConfig(10_000, 1_000, 1_000, 30*time.Second)

	// Bare Echo behind an http.Server with the same timeouts as
	// runtime.Server's, so the difference is the middleware.
	e := echo.New()
	e.GET("/x", trivial)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout.D(),
		ReadTimeout:       cfg.Server.ReadTimeout.D(),
		WriteTimeout:      cfg.Server.WriteTimeout.D(),
		IdleTimeout:       cfg.Server.IdleTimeout.D(),
	}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Shutdown(context.Background()) })
	bare := overheadTarget{url: "http://" + ln.Addr().String() + "/x", client: benchClient(overheadConc)}

	cell := startInProcess(b, cfg, nil, func(s *runtime.Server) {
		s.Tenant("GET", "/x", func(c echo.Context, _ shards.Accessor) error { return trivial(c) })
	})
	full := overheadTarget{url: cell.url + "/x", client: benchClient(overheadConc)}

	for _, t := range []overheadTarget{bare, full} { // warm connections and pools
		t.rate(b, 2000, overheadConc)
	}

	run := func(b *testing.B, t overheadTarget) {
		b.ReportAllocs()
		b.ResetTimer()
		t.rate(b, b.N, overheadConc)
		b.StopTimer()
		b.ReportMetric(float64(t.p50(b, 1000))/1e3, "p50-us")
	}
	b.Run("bare", func(b *testing.B) { run(b, bare) })
	b.Run("full", func(b *testing.B) {
		run(b, full)
		// Interleaved rounds, so host noise hits both sides alike. CPU
		// per request (client and server, both in this process) is the
		// steadier figure on a shared host: under CPU saturation,
		// throughput is its inverse.
		var bareRate, fullRate float64
		var bareCPU, fullCPU time.Duration
		var bareP50, fullP50 []time.Duration
		const perRound = 2000
		for round := 0; round < 5; round++ {
			c0 := processCPU()
			bareRate += bare.rate(b, perRound, overheadConc)
			c1 := processCPU()
			fullRate += full.rate(b, perRound, overheadConc)
			c2 := processCPU()
			bareCPU += c1 - c0
			fullCPU += c2 - c1
			bareP50 = append(bareP50, bare.p50(b, 300))
			fullP50 = append(fullP50, full.p50(b, 300))
		}
		slices.Sort(bareP50)
		slices.Sort(fullP50)
		b.ReportMetric(fullRate/bareRate, "throughput-vs-bare")
		if fullCPU > 0 {
			b.ReportMetric(float64(bareCPU)/float64(fullCPU), "cpu-throughput-vs-bare")
			b.ReportMetric(float64(fullCPU-bareCPU)/float64(5*perRound)/1e3, "cpu-added-us")
		}
		b.ReportMetric(float64(fullP50[2]-bareP50[2])/1e3, "p50-added-us")
		if n := cell.srv.Bulkheads().InFlight(); n != 0 {
			b.Fatalf("%d permits held after the run", n)
		}
	})
}
