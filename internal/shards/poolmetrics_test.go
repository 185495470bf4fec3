package shards

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/promtest"
	"github.com/cellgate/cellgate/internal/testpg"
)

// TestPoolCollector reads a real pool through the collector: checkouts,
// a checkout that waited, one abandoned on a full pool, and the gauges
// while a connection is held; the control database's series stay apart.
func TestPoolCollector(t *testing.T) {
	dsn := testpg.CreateDB(t, "poolmetrics")
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN", MaxConns: 2},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "DSN", MaxConns: 1}},
	}
	set, err := Open(context.Background(), db, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	c := NewPoolCollector(set)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	v := func(series string) float64 { return promtest.Value(t, reg, series) }

	ctx := context.Background()
	pool := set.Shards()[0].Pool
	held, err := pool.Acquire(ctx) // the pool is empty: opens the one connection
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`cellgate_db_pool_acquired_connections{database="shard-0"}`: 1,
		`cellgate_db_pool_total_connections{database="shard-0"}`:    1,
		`cellgate_db_pool_idle_connections{database="shard-0"}`:     0,
		`cellgate_db_pool_max_connections{database="shard-0"}`:      1,
		`cellgate_db_pool_max_connections{database="control"}`:      2,
		`cellgate_db_pool_acquires_total{database="shard-0"}`:       1,
		`cellgate_db_pool_empty_acquires_total{database="shard-0"}`: 1,
		`cellgate_db_pool_acquires_total{database="control"}`:       0,
	} {
		if got := v(series); got != want {
			t.Errorf("holding one connection: %s = %v, want %v", series, got, want)
		}
	}
	if v(`cellgate_db_pool_acquire_wait_seconds_total{database="shard-0"}`) <= 0 {
		t.Error("acquire wait did not grow with a checkout that opened a connection")
	}

	// The pool is full: a checkout with a short deadline is abandoned.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := pool.Acquire(short); err == nil {
		t.Fatal("a second checkout from a full pool of 1 succeeded")
	}
	cancel()
	if got := v(`cellgate_db_pool_canceled_acquires_total{database="shard-0"}`); got != 1 {
		t.Errorf("canceled acquires = %v, want 1", got)
	}

	held.Release()
	conn, err := pool.Acquire(ctx) // an idle connection: no wait
	if err != nil {
		t.Fatal(err)
	}
	conn.Release()
	for series, want := range map[string]float64{
		`cellgate_db_pool_acquired_connections{database="shard-0"}`: 0,
		`cellgate_db_pool_idle_connections{database="shard-0"}`:     1,
		`cellgate_db_pool_acquires_total{database="shard-0"}`:       2,
		`cellgate_db_pool_empty_acquires_total{database="shard-0"}`: 1,
	} {
		if got := v(series); got != want {
			t.Errorf("after release: %s = %v, want %v", series, got, want)
		}
	}
}
