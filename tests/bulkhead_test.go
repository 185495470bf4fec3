package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/promtest"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

// bhConfig is a cell config for in-process servers: header tenancy, the
// given caps, one shard on dsn.
func bhConfig(serverCap, tenantCap, dbCap int, timeout time.Duration) config.Config {
	return config.Config{
		Service: config.Service{Name: "bulkhead-test"},
		Server: config.Server{
			Address:               "127.0.0.1:0",
			MaxConcurrentRequests: serverCap,
			ReadHeaderTimeout:     config.Duration(5 * time.Second),
			IdleTimeout:           config.Duration(time.Minute),
			RequestTimeout:        config.Duration(timeout),
			ShutdownTimeout:       config.Duration(5 * time.Second),
			BodyLimitBytes:        1 << 20,
		},
		Tenancy: config.Tenancy{
			Enabled:               true,
			Source:                "header",
			Header:                config.HeaderSource{Name: "X-Tenant-ID"},
			MaxIDBytes:            64,
			MaxConcurrentRequests: tenantCap,
			MaxDBConnections:      dbCap,
		},
		Database: config.Database{
			Control: config.ControlDB{Name: "control", DSNEnv: "BH_DSN", MaxConns: 2},
			Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "BH_DSN", MaxConns: 8}},
		},
	}
}

// inProcessCell is a runtime.Server serving on a loopback listener in this
// process, so the test can read its gauges directly.
type inProcessCell struct {
	srv *runtime.Server
	url string
	reg *prometheus.Registry
}

// startInProcess builds the server over set (nil: no databases), lets
// register add routes, and serves until the test ends.
func startInProcess(tb testing.TB, cfg config.Config, set *shards.Set, register func(*runtime.Server)) *inProcessCell {
	tb.Helper()
	reg := prometheus.NewRegistry()
	srv, err := runtime.New(cfg, runtime.Options{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registry: reg,
		Getenv:   func(string) string { return "" },
		Shards:   set,
	})
	if err != nil {
		tb.Fatal(err)
	}
	register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	return &inProcessCell{srv: srv, url: "http://" + ln.Addr().String(), reg: reg}
}

// leakMix is the share of each kind of request in the leak test, per 1000.
var leakMix = []struct {
	kind string
	per  int
}{
	{"plain", 560},
	{"db", 150},
	{"stream", 120},
	{"stream-db", 40},
	{"error", 40},
	{"panic", 30},
	{"panic-db", 20},
	{"timeout", 10},
	{"timeout-db", 10},
	{"cancel", 20},
}

func leakKind(i int) string {
	n := i % 1000
	for _, m := range leakMix {
		if n < m.per {
			return m.kind
		}
		n -= m.per
	}
	return "plain"
}

// TestNoPermitLeaks sends 100,000 requests (5,000 under -race) through
// the full chain on a loopback server — plain, database checkouts,
// streaming responses (some checking out in the body), handler errors,
// panics (some holding a connection), request timeouts (some holding a
// connection) and client cancellations — with caps tight enough that
// every refusal path runs too. Afterwards every gauge is 0: the tenant
// request engine, the database permits, the server limiter, their
// metrics, and the shard pool's checked-out connections.
func TestNoPermitLeaks(t *testing.T) {
	total, timeout := 100_000, 20*time.Millisecond
	if underRace {
		// About 20x slower per request on a shared 2-core host; a longer
		// request timeout keeps database checkouts from timing out.
		total, timeout = 5_000, 50*time.Millisecond
	}
	dsn := testpg.CreateDB(t, "bhleak")
	cfg := bhConfig(24, 3, 2, timeout)
	set, err := shards.Open(context.Background(), cfg.Database, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	work := func(c echo.Context, acc shards.Accessor, db bool, fn func(ctx context.Context) error) error {
		ctx := c.Request().Context()
		if !db {
			return fn(ctx)
		}
		return acc.Conn(ctx, func(conn *pgxpool.Conn) error {
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
			return fn(ctx)
		})
	}
	cell := startInProcess(t, cfg, set, func(s *runtime.Server) {
		s.Tenant("GET", "/leak/:kind", func(c echo.Context, acc shards.Accessor) error {
			kind := c.Param("kind")
			db := strings.HasSuffix(kind, "-db") || kind == "db"
			switch strings.TrimSuffix(kind, "-db") {
			case "plain":
				return c.String(200, "ok")
			case "db":
				return work(c, acc, true, func(context.Context) error { return c.String(200, "ok") })
			case "stream":
				res := c.Response()
				res.Header().Set("Content-Type", "text/event-stream")
				res.WriteHeader(200)
				res.Flush()
				for i := 0; i < 3; i++ {
					err := work(c, acc, db && i == 1, func(context.Context) error {
						_, err := fmt.Fprintf(res, "data: %d\n\n", i)
						res.Flush()
						return err
					})
					if err != nil {
						return nil // head is out; the stream just ends
					}
				}
				return nil
			case "error":
				return errors.New("handler failed")
			case "panic":
				return work(c, acc, db, func(context.Context) error { panic("handler panic") })
			case "timeout", "cancel":
				return work(c, acc, db, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			}
			return c.NoContent(404)
		})
	})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		statuses = map[string]map[int]int{}
	)
	record := func(kind string, code int) {
		mu.Lock()
		if statuses[kind] == nil {
			statuses[kind] = map[int]int{}
		}
		statuses[kind][code]++
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				kind := leakKind(i)
				ctx, cancel := context.WithCancel(context.Background())
				if kind == "cancel" {
					ctx, cancel = context.WithTimeout(context.Background(), 3*time.Millisecond)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", cell.url+"/leak/"+kind, nil)
				req.Header.Set("X-Tenant-ID", fmt.Sprintf("t%d", rng.IntN(12)))
				resp, err := client.Do(req)
				if err != nil {
					cancel()
					record(kind, 0) // the client gave up
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				cancel()
				if err != nil {
					record(kind, -resp.StatusCode) // body cut short
					continue
				}
				record(kind, resp.StatusCode)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)

	b := cell.srv.Bulkheads()
	deadline := time.Now().Add(10 * time.Second)
	for b.InFlight() != 0 || set.Shards()[0].Pool.Stat().AcquiredConns() != 0 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d requests in %s (race=%v); statuses by kind: %v", total, elapsed.Round(time.Millisecond), underRace, statuses)
	if n := b.Requests.InFlight(); n != 0 {
		t.Errorf("tenant request permits in flight: %d", n)
	}
	if n := b.DB.InFlight(); n != 0 {
		t.Errorf("db permits in flight: %d", n)
	}
	if n := b.Server.InFlight(); n != 0 {
		t.Errorf("server permits in flight: %d", n)
	}
	if n := set.Shards()[0].Pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("shard connections checked out: %d", n)
	}
	for _, series := range []string{
		`cellgate_server_in_flight_requests`,
		`cellgate_admission_in_flight_permits{engine="request"}`,
		`cellgate_admission_in_flight_permits{engine="db"}`,
	} {
		if v := promtest.Value(t, cell.reg, series); v != 0 {
			t.Errorf("%s = %v after the run", series, v)
		}
	}

	// The mix really ran: each kind got its expected answer in at least a tenth of the
	// time, and the caps refused some requests.
	expect := map[string]int{
		"plain": 200, "db": 200, "stream": 200, "stream-db": 200, "error": 500,
		"panic": 500, "panic-db": 500, "timeout": 503, "timeout-db": 503, "cancel": 0,
	}
	refused := 0
	for kind, want := range expect {
		sum := 0
		for _, n := range statuses[kind] {
			sum += n
		}
		if sum == 0 || statuses[kind][want]*10 < sum {
			t.Errorf("%s: %v, want mostly %d", kind, statuses[kind], want)
		}
		refused += statuses[kind][503]
	}
	if refused == 0 {
		t.Error("no request was refused; the caps were not exercised")
	}
	if v := promtest.Value(t, cell.reg, `cellgate_tenant_bulkhead_rejections_total{kind="request"}`); v == 0 {
		t.Error("no tenant bulkhead rejection")
	}
}

// TestCellBootsWithBulkheads boots the real binary with the per-tenant caps
// on: the boot log carries the policy's client-chosen-tenant warning, the
// example handlers work through the db-permit accessor, the admin endpoint
// reports both engines, and the metrics lint.
func TestCellBootsWithBulkheads(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cell.json")
	if err := os.WriteFile(file, []byte(`{"server":{"max_concurrent_requests":64},"tenancy":{"max_concurrent_requests":16,"max_db_connections":4}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCell(t, append(cellEnv(t), "CELLGATE_ADMIN_TOKEN=test-admin-token-0123456789abcdef0123456789"), "serve", "-config", file)
	c.waitStatus(t, "/readyz", 200, 60*time.Second)
	if !strings.Contains(c.Logs(), "tenancy.source") || !strings.Contains(c.Logs(), "lets the client choose its tenant id") {
		t.Fatalf("boot log lacks the client-chosen tenant warning:\n%s", c.Logs())
	}

	// Every example handler checks its connection out through the accessor
	// (sign-up in a transaction that also enqueues a job).
	code, body := c.do(t, "POST", "/signup", "acme", `{"email":"a@acme.test","name":"A"}`)
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %s", code, body)
	}
	var acct struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(body, &acct); err != nil || acct.ID == 0 {
		t.Fatalf("signup body %s: %v", body, err)
	}
	if code, body := c.do(t, "GET", fmt.Sprintf("/account?id=%d", acct.ID), "acme", ""); code != 200 {
		t.Fatalf("get account: %d %s", code, body)
	}
	if code, body := c.do(t, "POST", "/orders", "acme", fmt.Sprintf(`{"account_id":%d,"amount_cents":100}`, acct.ID)); code != http.StatusCreated {
		t.Fatalf("order: %d %s", code, body)
	}
	if code, body := c.do(t, "GET", fmt.Sprintf("/orders?account_id=%d", acct.ID), "acme", ""); code != 200 || !strings.Contains(string(body), `"amount_cents":100`) {
		t.Fatalf("list orders: %d %s", code, body)
	}
	var report struct {
		Server struct {
			Max      int64 `json:"max_concurrent_requests"`
			InFlight int64 `json:"in_flight"`
		} `json:"server"`
		Requests struct {
			MaxConcurrent int64             `json:"max_concurrent"`
			Outcomes      map[string]uint64 `json:"outcomes"`
		} `json:"requests"`
		DB struct {
			MaxConcurrent int64             `json:"max_concurrent"`
			InFlight      int64             `json:"in_flight"`
			Outcomes      map[string]uint64 `json:"outcomes"`
		} `json:"db"`
	}
	if err := getAdminJSON(c.url+"/admin/admission", "test-admin-token-0123456789abcdef0123456789", &report); err != nil {
		t.Fatalf("admin report: %v", err)
	}
	if report.Server.Max != 64 || report.Requests.MaxConcurrent != 16 || report.DB.MaxConcurrent != 4 ||
		report.Requests.Outcomes["admitted"] != 4 || report.DB.Outcomes["admitted"] != 4 || report.DB.InFlight != 0 {
		t.Fatalf("admin report: %+v", report)
	}

	resp, err := http.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`cellgate_tenant_bulkhead_rejections_total{kind="db"} 0`,
		`cellgate_server_in_flight_requests 0`,
		`cellgate_http_requests_total{code="2xx",method="POST",route="/signup"} 1`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	problems, err := promlint.New(strings.NewReader(string(raw))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}
