package shardmap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/pgfollow"
	"github.com/cellgate/cellgate/internal/shards"
)

// Options tune a Watcher; zero values take the defaults.
type Options struct {
	// Boot is the map of the config (FromConfig), written as the first
	// version when the control database holds none. Required.
	Boot Record
	// Process names this process in cellgate_shard_map_applied (default
	// "<host>/<pid>/<random>").
	Process string
	// Resync is the version-check and heartbeat period (default
	// pgfollow.DefaultResync).
	Resync time.Duration
	// Retry is the wait before reconnecting after an error (default
	// pgfollow.DefaultRetry).
	Retry time.Duration
	// Log receives refused records and connection errors (default
	// slog.Default()).
	Log *slog.Logger
}

// Watcher follows the control database's shard map and installs each good
// version in a shards.Set.
type Watcher struct {
	pool *pgxpool.Pool
	set  *shards.Set
	opt  Options
	m    metrics

	mu      sync.Mutex
	bad     int64  // the version last refused, 0 when none
	problem string // why the record in the database is not the map in force
	synced  bool   // the record has been read (or written) once
	older   int64  // requests on replaced maps at the last heartbeat
}

type metrics struct {
	loads   *prometheus.CounterVec
	current prometheus.Gauge
	version prometheus.Gauge
	frozen  prometheus.Gauge
}

// NewWatcher returns a watcher that installs into set the record it reads
// from pool (the control database). The set keeps serving its boot map
// until Run has read a good record.
func NewWatcher(pool *pgxpool.Pool, set *shards.Set, o Options) (*Watcher, error) {
	if err := o.Boot.Validate(set.ShardNames()); err != nil {
		return nil, fmt.Errorf("shard map: boot map: %w", err)
	}
	if o.Process == "" {
		o.Process = defaultProcess()
	}
	o.Resync, o.Retry, o.Log = pgfollow.Defaults(o.Resync, o.Retry, o.Log)
	w := &Watcher{pool: pool, set: set, opt: o, m: metrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_shard_map_loads_total",
			Help: "Shard map versions read from the control database, by result (ok, invalid: refused, the last good map stays; unreadable: the read failed).",
		}, []string{"result"}),
		current: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_shard_map_current",
			Help: "1 when the shard map in force is the control database's record, 0 while that record is refused and the last good map is used.",
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_shard_map_version",
			Help: "Version of the shard map in force (0: the config's, before the record was read).",
		}),
		frozen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_shard_map_frozen_slots",
			Help: "Slots frozen for a move between shards in the map in force.",
		}),
	}}
	for _, r := range []string{"ok", "invalid", "unreadable"} {
		w.m.loads.WithLabelValues(r)
	}
	w.m.current.Set(1)
	return w, nil
}

// Register adds the watcher's metrics to reg (the server's registry).
func (w *Watcher) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{w.m.loads, w.m.current, w.m.version, w.m.frozen} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// defaultProcess is "<host>/<pid>/<random>": unique among a cell's
// processes, readable in WaitApplied's errors.
func defaultProcess() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Process is the id this watcher's heartbeat row carries.
func (w *Watcher) Process() string { return w.opt.Process }

// Version is the version of the map in force (0: the config's).
func (w *Watcher) Version() int64 { return w.set.Routing().Version() }

// Problem says why the control database's record is not in force ("" when
// it is): the /readyz detail of a cell serving its last good map.
func (w *Watcher) Problem() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.problem
}

// Ready is the /readyz check: an error until the record has been read
// once, so a process does not take traffic on its config's map when the
// control database holds another one (the config's map is in force until
// then).
func (w *Watcher) Ready(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		return errors.New("the shard map has not been read from the control database yet")
	}
	return nil
}

// Run follows the record until ctx ends: it writes the boot map when the
// database holds none, LISTENs on Channel on a connection of its own,
// installs every good new version, checks the version and beats the
// heartbeat every Options.Resync, and reconnects after Options.Retry when
// the database goes away, keeping the map in force meanwhile. On the way
// out it removes its heartbeat row. It returns ctx's error.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.forget()
	return pgfollow.Run(ctx, w.pool, pgfollow.Options{
		Channel: Channel,
		Period:  w.beat,
		Retry:   w.opt.Retry,
		Stopped: func(err error) {
			w.opt.Log.Warn("shard map: following stopped; the map in force stays", "version", w.Version(), "err", err)
		},
	}, pgfollow.Hooks{
		Start:    w.start,
		Notified: func(ctx context.Context) error { return w.sync(ctx, w.pool) },
		Tick:     func(ctx context.Context, c *pgx.Conn) error { return w.sync(ctx, c) },
	})
}

// forget deletes the heartbeat row, so a move does not wait for a process
// that has stopped; a crashed process's row goes stale instead.
func (w *Watcher) forget() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = w.pool.Exec(ctx, `DELETE FROM cellgate_shard_map_applied WHERE process = $1`, w.opt.Process)
}

// start begins a listening connection's life: it seeds the record from
// the boot map when the database holds none, adds the config's new shards,
// drops long-gone processes' heartbeats and installs the version in force.
func (w *Watcher) start(ctx context.Context, c *pgx.Conn) error {
	if _, _, err := Seed(ctx, c, w.opt.Boot); err != nil {
		return err
	}
	if _, err := AddShards(ctx, c, w.opt.Boot.names()); err != nil {
		return err
	}
	// Rows of processes that died without removing theirs (a crash, a
	// kill) are ignored once stale and deleted here once long gone.
	if _, err := c.Exec(ctx, `DELETE FROM cellgate_shard_map_applied WHERE heartbeat < now() - interval '1 hour'`); err != nil {
		return err
	}
	return w.sync(ctx, c)
}

// sync installs the record's version when it is new and good, then beats
// the heartbeat with the version in force.
func (w *Watcher) sync(ctx context.Context, db DB) error {
	var version int64
	err := db.QueryRow(ctx, `SELECT version FROM cellgate_shard_map`).Scan(&version)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		w.m.loads.WithLabelValues("unreadable").Inc()
		return err
	}
	if err == nil && version != w.Version() && version != w.refused() {
		if err := w.load(ctx, db); err != nil {
			return err
		}
	}
	older := w.set.OlderInFlight()
	if _, err := db.Exec(ctx, `INSERT INTO cellgate_shard_map_applied (process, version, older_in_flight, heartbeat)
		VALUES ($1, $2, $3, now())
		ON CONFLICT (process) DO UPDATE SET version = EXCLUDED.version,
			older_in_flight = EXCLUDED.older_in_flight, heartbeat = EXCLUDED.heartbeat`,
		w.opt.Process, w.Version(), older); err != nil {
		return err
	}
	w.mu.Lock()
	w.synced, w.older = true, older
	w.mu.Unlock()
	return nil
}

// drainBeat is the heartbeat period while requests of a replaced map are
// in flight: a move waiting for them (WaitOptions.Drain) learns they are
// done within it.
const drainBeat = 10 * time.Millisecond

// beat is how long to wait for a notification before the next check and
// heartbeat.
func (w *Watcher) beat() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.older > 0 {
		return drainBeat
	}
	return w.opt.Resync
}

// refused is the version last refused (0: none).
func (w *Watcher) refused() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bad
}

// load reads the record and installs it, or refuses it with an error log
// and the invalid count, keeping the map in force. Only a failed read is
// returned as an error.
func (w *Watcher) load(ctx context.Context, db DB) error {
	var (
		version int64
		raw     []byte
	)
	if err := db.QueryRow(ctx, `SELECT version, map FROM cellgate_shard_map`).Scan(&version, &raw); err != nil {
		w.m.loads.WithLabelValues("unreadable").Inc()
		return err
	}
	return w.install(version, raw)
}

// install compiles raw against the process's shards and swaps it in.
func (w *Watcher) install(version int64, raw []byte) error {
	r, err := compileRaw(version, raw, w.set.ShardNames())
	if err == nil {
		err = w.set.Install(r)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.bad = version
		w.problem = fmt.Sprintf("shard map version %d refused, version %d in force: %v", version, w.Version(), err)
		w.m.loads.WithLabelValues("invalid").Inc()
		w.m.current.Set(0)
		w.opt.Log.Error("shard map: record refused; the last good map stays in force", "version", version, "in_force", w.Version(), "err", err)
		return nil
	}
	w.bad, w.problem = 0, ""
	w.m.loads.WithLabelValues("ok").Inc()
	w.m.current.Set(1)
	w.m.version.Set(float64(version))
	w.m.frozen.Set(float64(frozenCount(r)))
	w.opt.Log.Info("shard map installed", "version", version, "frozen", fmt.Sprint(r.FrozenRanges()))
	return nil
}

// compileRaw decodes and compiles a stored record for shards names.
func compileRaw(version int64, raw []byte, names []string) (*shards.Routing, error) {
	rec, err := decode(raw)
	if err != nil {
		return nil, err
	}
	return rec.Routing(version, names)
}

func frozenCount(r *shards.Routing) int {
	n := 0
	for _, rg := range r.FrozenRanges() {
		n += rg.Len()
	}
	return n
}
