package runtime

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/testpg"
)

// syncBuffer is a log sink the server's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// statusRecorder keeps the status the server wrote, if any.
type statusRecorder struct {
	http.ResponseWriter
	status *int
}

func (r statusRecorder) WriteHeader(code int) {
	*r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r statusRecorder) Write(p []byte) (int, error) {
	if *r.status == 0 {
		*r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

// TestClientGoneIsCounted499 hangs up on handlers waiting on their context
// and on a PostgreSQL query (pg_sleep, cancelled by pgx): each is counted
// under 499, logged below ERROR, and answered nothing; a server-side
// timeout of the same handler stays a 5xx.
func TestClientGoneIsCounted499(t *testing.T) {
	conn, err := pgx.Connect(context.Background(), testpg.Server())
	if err != nil {
		t.Fatalf("connect %s: %v", testpg.Server(), err)
	}
	defer conn.Close(context.Background())

	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Server.RequestTimeout = config.Duration(10 * time.Second)
	s, err := New(cfg, Options{Logger: log, Registry: reg, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	s.Public("GET", "/wait", func(c echo.Context) error {
		started <- struct{}{}
		<-c.Request().Context().Done()
		return c.Request().Context().Err()
	})
	s.Public("GET", "/db", func(c echo.Context) error {
		started <- struct{}{}
		_, err := conn.Exec(c.Request().Context(), "SELECT pg_sleep(30)")
		return err
	})
	s.Public("GET", "/timeout", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), time.Millisecond)
		defer cancel()
		<-ctx.Done()
		return ctx.Err()
	})

	var mu sync.Mutex
	written := map[string]int{}
	done := make(chan struct{}, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := 0
		s.Echo().ServeHTTP(statusRecorder{w, &status}, r)
		mu.Lock()
		written[r.URL.Path] = status
		mu.Unlock()
		done <- struct{}{}
	}))
	defer ts.Close()

	for _, path := range []string{"/wait", "/db"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
		errc := make(chan error, 1)
		go func() {
			resp, err := ts.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler did not start", path)
		}
		if path == "/db" {
			time.Sleep(50 * time.Millisecond) // let the query reach the server
		}
		cancel()
		if err := <-errc; err == nil {
			t.Fatalf("%s: the cancelled client got an answer", path)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler did not end after the client went away", path)
		}
	}
	resp, err := ts.Client().Get(ts.URL + "/timeout")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-done

	mu.Lock()
	defer mu.Unlock()
	for _, path := range []string{"/wait", "/db"} {
		if got := written[path]; got != 0 {
			t.Errorf("%s: the server wrote status %d to a client that went away", path, got)
		}
		if got := testutil.ToFloat64(s.obs.metrics.requests.WithLabelValues(path, "GET", "499")); got != 1 {
			t.Errorf("%s: cellgate_http_requests_total{code=\"499\"} = %v, want 1", path, got)
		}
		if got := testutil.ToFloat64(s.obs.metrics.requests.WithLabelValues(path, "GET", "5xx")); got != 0 {
			t.Errorf("%s: cellgate_http_requests_total{code=\"5xx\"} = %v, want 0", path, got)
		}
	}
	if written["/timeout"] != http.StatusServiceUnavailable {
		t.Errorf("/timeout: status %d, want 503", written["/timeout"])
	}
	if got := testutil.ToFloat64(s.obs.metrics.requests.WithLabelValues("/timeout", "GET", "5xx")); got != 1 {
		t.Errorf("/timeout: cellgate_http_requests_total{code=\"5xx\"} = %v, want 1", got)
	}
	out := logs.String()
	if strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("a client going away was logged at ERROR:\n%s", out)
	}
	if n := strings.Count(out, `"msg":"client went away"`); n != 2 {
		t.Errorf("%d debug lines for the two clients that went away, want 2:\n%s", n, out)
	}
}
