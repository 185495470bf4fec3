package shardmap

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/slots"
	"github.com/cellgate/cellgate/internal/testpg"
)

// controlDB creates a migrated control database and returns a pool on it.
func controlDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := testpg.CreateDB(t, "shardmap")
	ctx := context.Background()
	if err := Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// startWatcher runs a watcher over a fresh set until the test ends.
func startWatcher(t testing.TB, pool *pgxpool.Pool, name string) (*Watcher, *prometheus.Registry) {
	t.Helper()
	set := openSet(t)
	w, err := NewWatcher(pool, set, Options{Boot: twoShards(), Process: name, Resync: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := w.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, reg
}

// waitFor polls cond every 5ms; it fails the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// TestWatchersFollowTheRecord: two processes' watchers seed the record
// once, follow a freeze, a switch and an unfreeze within 2 s each, and
// WaitApplied confirms each version from their heartbeats.
func TestWatchersFollowTheRecord(t *testing.T) {
	ctx := context.Background()
	pool := controlDB(t)
	if _, err := Freeze(ctx, pool, []slots.Range{{Lo: 0, Hi: 1}}); err != ErrNoRecord {
		t.Fatalf("freeze before any record: %v", err)
	}
	a, _ := startWatcher(t, pool, "a")
	b, _ := startWatcher(t, pool, "b")
	// Start-up (connect, migrate check, seed) is not what is timed.
	waitFor(t, 10*time.Second, "both watchers load the seeded version 1", func() bool { return a.Version() == 1 && b.Version() == 1 })
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := WaitApplied(wctx, pool, 1, WaitOptions{}); err != nil {
		t.Fatal(err)
	}

	rg := []slots.Range{{Lo: 4096, Hi: 8191}}
	v, err := Freeze(ctx, pool, rg)
	if err != nil || v != 2 {
		t.Fatalf("freeze: version %d, %v", v, err)
	}
	if again, err := Freeze(ctx, pool, rg); err != nil || again != v {
		t.Fatalf("freezing again wrote version %d (%v), want %d unchanged", again, err, v)
	}
	took := waitFor(t, 2*time.Second, "both sets freeze", func() bool {
		return a.set.Routing().Frozen(5000) && b.set.Routing().Frozen(5000)
	})
	t.Logf("freeze reached both watchers in %v", took)
	if err := WaitApplied(wctx, pool, v, WaitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Switch(ctx, pool, []slots.Range{{Lo: 0, Hi: 4096}}, "shard-1"); err == nil || !strings.Contains(err.Error(), "slot 0 of 0-4096 is not frozen") {
		t.Fatalf("switch of an unfrozen range: %v", err)
	}
	if _, err := Switch(ctx, pool, rg, "shard-9"); err == nil || !strings.Contains(err.Error(), `unknown shard "shard-9"`) {
		t.Fatalf("switch to an unknown shard: %v", err)
	}
	if v, err = Switch(ctx, pool, rg, "shard-1"); err != nil || v != 3 {
		t.Fatalf("switch: version %d, %v", v, err)
	}
	waitFor(t, 2*time.Second, "both sets switch", func() bool {
		return a.set.Routing().Shard(5000) == 1 && b.set.Routing().Shard(5000) == 1 && a.set.Routing().Frozen(5000)
	})
	if v, err = Unfreeze(ctx, pool, rg); err != nil || v != 4 {
		t.Fatalf("unfreeze: version %d, %v", v, err)
	}
	if err := WaitApplied(wctx, pool, v, WaitOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*Watcher{a, b} {
		r := w.set.Routing()
		if r.Version() != 4 || r.AnyFrozen() || r.Shard(4095) != 0 || r.Shard(4096) != 1 {
			t.Fatalf("%s after the move: version %d frozen %v", w.Process(), r.Version(), r.FrozenRanges())
		}
	}
	rec, version, err := Read(ctx, pool)
	if err != nil || version != 4 || strings.Join(rec.Shards[1].Slots, ",") != "4096-16383" {
		t.Fatalf("record: %+v version %d %v", rec, version, err)
	}
}

// TestWaitAppliedNamesTheProcessBehind: a live process stuck at an older
// version keeps WaitApplied waiting, and the error names it.
func TestWaitAppliedNamesTheProcessBehind(t *testing.T) {
	ctx := context.Background()
	pool := controlDB(t)
	if _, err := pool.Exec(ctx, `INSERT INTO cellgate_shard_map_applied (process, version) VALUES ('stuck', 3), ('gone', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE cellgate_shard_map_applied SET heartbeat = now() - interval '1 minute' WHERE process = 'gone';
		INSERT INTO cellgate_shard_map_applied (process, version, heartbeat) VALUES ('dead', 1, now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := WaitApplied(wctx, pool, 4, WaitOptions{})
	if err == nil || !strings.Contains(err.Error(), "stuck at 3") || strings.Contains(err.Error(), "gone") {
		t.Fatalf("WaitApplied = %v, want the error to name the live process behind only", err)
	}
	if err := WaitApplied(ctx, pool, 3, WaitOptions{}); err != nil {
		t.Fatalf("version every live process applies: %v", err)
	}
	// A watcher that connects deletes rows gone for over an hour.
	w, _ := startWatcher(t, pool, "a")
	waitFor(t, 10*time.Second, "the watcher's first read", func() bool { return w.Ready(ctx) == nil })
	var ids []string
	rows, err := pool.Query(ctx, `SELECT process FROM cellgate_shard_map_applied ORDER BY process`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil || strings.Join(ids, " ") != "a gone stuck" {
		t.Fatalf("processes after a watcher connected: %q %v", ids, rows.Err())
	}
}

// TestBadRecordKeepsTheLastGoodMap: a record written behind the API's
// back that does not check out is refused with a metric and a /readyz
// problem, the last good map staying in force; a good record after it is
// installed; a change written without a notification arrives with the
// resync.
func TestBadRecordKeepsTheLastGoodMap(t *testing.T) {
	ctx := context.Background()
	pool := controlDB(t)
	w, reg := startWatcher(t, pool, "a")
	waitFor(t, 10*time.Second, "the seeded version", func() bool { return w.Version() == 1 })
	v, err := Freeze(ctx, pool, []slots.Range{{Lo: 10, Hi: 20}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the freeze", func() bool { return w.Version() == v })
	// In this order: the last one is bad in itself, so a change over it is
	// refused below (a shard the watcher's config lacks is bad only to the
	// watcher).
	bad := []struct{ name, raw string }{
		{"unknown shard", `{"shards": [{"name": "shard-0", "slots": ["0-8191"]}, {"name": "shard-9", "slots": ["8192-16383"]}]}`},
		{"unknown field", `{"shards": [{"name": "shard-0", "slots": ["0-16383"]}], "frozn": []}`},
		{"out of range", `{"shards": [{"name": "shard-0", "slots": ["0-8191"]}, {"name": "shard-1", "slots": ["8192-20000"]}]}`},
		{"overlap", `{"shards": [{"name": "shard-0", "slots": ["0-8191"]}, {"name": "shard-1", "slots": ["8000-16383"]}]}`},
	}
	refused := 0.0
	for _, b := range bad {
		name, raw := b.name, b.raw
		if _, err := pool.Exec(ctx, `UPDATE cellgate_shard_map SET version = version + 1, map = $1`, raw); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `NOTIFY `+Channel); err != nil {
			t.Fatal(err)
		}
		refused++
		waitFor(t, 2*time.Second, name+": refused", func() bool {
			return testutil.ToFloat64(w.m.loads.WithLabelValues("invalid")) == refused
		})
		if w.Version() != v || !w.set.Routing().Frozen(15) || testutil.ToFloat64(w.m.current) != 0 || !strings.Contains(w.Problem(), "refused") {
			t.Fatalf("%s: version %d in force (want %d), problem %q", name, w.Version(), v, w.Problem())
		}
	}
	if _, err := Freeze(ctx, pool, []slots.Range{{Lo: 30, Hi: 30}}); err == nil || !strings.Contains(err.Error(), "fix the record before changing it") {
		t.Fatalf("a change over a bad record: %v", err)
	}
	// A good record, written without NOTIFY: the resync finds it.
	good := `{"shards": [{"name": "shard-0", "slots": ["0-99"]}, {"name": "shard-1", "slots": ["100-16383"]}]}`
	if _, err := pool.Exec(ctx, `UPDATE cellgate_shard_map SET version = version + 1, map = $1`, good); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the good record by resync", func() bool { return w.set.Routing().Shard(100) == 1 })
	if w.Problem() != "" || testutil.ToFloat64(w.m.current) != 1 || w.set.Routing().AnyFrozen() {
		t.Fatalf("after a good record: problem %q", w.Problem())
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %v", problems, err)
	}
}

// TestAddShardsAppendsOnly: a shard added to database.shards after the
// record was written joins it with no slots (once), so a range can be
// switched to it; a change may not drop or rename a shard.
func TestAddShardsAppendsOnly(t *testing.T) {
	ctx := context.Background()
	pool := controlDB(t)
	if v, created, err := Seed(ctx, pool, twoShards()); err != nil || !created || v != 1 {
		t.Fatalf("seed: %d %v %v", v, created, err)
	}
	if v, created, err := Seed(ctx, pool, Record{Shards: []ShardSlots{{Name: "x", Slots: []string{"0-16383"}}}}); err != nil || created || v != 1 {
		t.Fatalf("a second seed must keep the record: %d %v %v", v, created, err)
	}
	three := []string{"shard-0", "shard-1", "shard-2"}
	for round := range 2 { // the second round changes nothing
		if v, err := AddShards(ctx, pool, three); err != nil || v != 2 {
			t.Fatalf("add shards (round %d): version %d %v", round, v, err)
		}
	}
	rec, _, err := Read(ctx, pool)
	if err != nil || len(rec.Shards) != 3 || rec.Shards[2].Name != "shard-2" || len(rec.Shards[2].Slots) != 0 {
		t.Fatalf("record: %+v %v", rec, err)
	}
	_, err = Update(ctx, pool, func(r Record) (Record, error) {
		r.Shards = r.Shards[1:]
		r.Shards[0].Slots = []string{"0-16383"}
		return r, nil
	})
	if err == nil || !strings.Contains(err.Error(), "not remove, rename or reorder shards") {
		t.Fatalf("dropping a shard: %v", err)
	}
}

// TestWaitAppliedDrainsOlderRequests: a request in flight on the map a
// freeze replaced holds WaitApplied with Drain (naming the process) but
// not without; once it ends, the drain completes within a beat.
func TestWaitAppliedDrainsOlderRequests(t *testing.T) {
	ctx := context.Background()
	pool := controlDB(t)
	w, _ := startWatcher(t, pool, "a")
	waitFor(t, 10*time.Second, "the seeded version", func() bool { return w.Version() == 1 })
	old := w.set.Routing()
	old.Enter()
	v, err := Freeze(ctx, pool, []slots.Range{{Lo: 0, Hi: 99}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := WaitApplied(wctx, pool, v, WaitOptions{}); err != nil {
		t.Fatalf("applied without drain: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := WaitApplied(short, pool, v, WaitOptions{Drain: true}); err == nil || !strings.Contains(err.Error(), "a with 1 requests on older maps") {
		t.Fatalf("drain with a request in flight: %v", err)
	}
	old.Leave()
	start := time.Now()
	if err := WaitApplied(wctx, pool, v, WaitOptions{Drain: true}); err != nil {
		t.Fatalf("drain after the request ended: %v", err)
	}
	t.Logf("drained %v after the last older request ended", time.Since(start))
}
