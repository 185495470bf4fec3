package telemetry

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SpanExporter takes batches of ended spans. ExportSpans is called from
// the batcher's goroutine, one call at a time; the records are valid only
// until it returns (see SpanRecord).
type SpanExporter interface {
	ExportSpans(ctx context.Context, spans []*SpanRecord) error
	Shutdown(ctx context.Context) error
}

// BatchConfig is the batcher's queue and timing, the OTEL_BSP_* variables
// (BatchConfigFromEnv); zero fields take the defaults.
type BatchConfig struct {
	// MaxQueueSize is how many ended spans wait for export; a span ended
	// while the queue is full is dropped and counted (default 2048).
	MaxQueueSize int
	// MaxExportBatchSize is the most spans one export carries (default 512).
	MaxExportBatchSize int
	// ScheduleDelay is the longest a span waits before its batch is
	// exported (default 5 s).
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export (default 30 s).
	ExportTimeout time.Duration
	// Blocking makes End wait for room in a full queue instead of
	// dropping the span: for tests and benchmarks that count spans.
	Blocking bool
}

// BatchConfigFromEnv reads OTEL_BSP_MAX_QUEUE_SIZE,
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_SCHEDULE_DELAY and
// OTEL_BSP_EXPORT_TIMEOUT (milliseconds) with getenv.
func BatchConfigFromEnv(getenv func(string) string) (BatchConfig, error) {
	var c BatchConfig
	num := func(name string) (int, error) {
		v := getenv(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, errors.New(name + ": want an integer > 0, got " + strconv.Quote(v))
		}
		return n, nil
	}
	var err error
	var ms int
	if c.MaxQueueSize, err = num("OTEL_BSP_MAX_QUEUE_SIZE"); err != nil {
		return c, err
	}
	if c.MaxExportBatchSize, err = num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"); err != nil {
		return c, err
	}
	if ms, err = num("OTEL_BSP_SCHEDULE_DELAY"); err != nil {
		return c, err
	}
	c.ScheduleDelay = time.Duration(ms) * time.Millisecond
	if ms, err = num("OTEL_BSP_EXPORT_TIMEOUT"); err != nil {
		return c, err
	}
	c.ExportTimeout = time.Duration(ms) * time.Millisecond
	return c, nil
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.MaxQueueSize <= 0 {
		c.MaxQueueSize = 2048
	}
	if c.MaxExportBatchSize <= 0 {
		c.MaxExportBatchSize = 512
	}
	if c.MaxExportBatchSize > c.MaxQueueSize {
		c.MaxExportBatchSize = c.MaxQueueSize // as the SDK clamps it
	}
	if c.ScheduleDelay <= 0 {
		c.ScheduleDelay = 5 * time.Second
	}
	if c.ExportTimeout <= 0 {
		c.ExportTimeout = 30 * time.Second
	}
	return c
}

// batcher queues ended spans and exports them in batches from its own
// goroutine. End pays one push on a lock-free ring that no goroutine
// waits on (the export goroutine sleeps until a batch is due, a kick or a
// flush), so the request path neither takes a lock nor wakes a goroutine
// per span; it kicks the goroutine once a batch is queued.
type batcher struct {
	cfg BatchConfig
	// sync exports from enqueue, under syncMu (Config.Sync).
	sync      bool
	syncMu    sync.Mutex
	exporters []SpanExporter
	queue     *ring
	// free holds records exported and reset, for the next spans: at
	// most a batch, so the records alive between bursts (which the
	// collector scans every cycle) stay near a queue and a batch. Room
	// for a full queue as well allocates fewer records (about 2 % of
	// spans make one with a batch's room) but keeps more alive for every
	// collection to mark; BenchmarkTracingCostPaired did not tell the two
	// apart.
	free      *ring
	kick      chan struct{}
	flushes   chan chan error
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closed    atomic.Bool
	// dropped counts spans lost to a full queue or ended after Shutdown
	// (a span ended while Shutdown drains may be lost uncounted, as with
	// the SDK's batcher).
	dropped atomic.Int64
}

// newBatcher starts the export goroutine.
func newBatcher(cfg BatchConfig, sync bool, exporters []SpanExporter) *batcher {
	cfg = cfg.withDefaults()
	b := &batcher{
		cfg: cfg, sync: sync, exporters: exporters,
		queue: newRing(cfg.MaxQueueSize), free: newRing(cfg.MaxExportBatchSize), kick: make(chan struct{}, 1),
		flushes: make(chan chan error), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	go b.run()
	return b
}

// record is an empty record for a new span: a recycled one, else new.
// A free list of the batcher's own rather than a sync.Pool: the
// collector empties a pool every other cycle, and a record is put back
// on another goroutine (often another P) than the one taking it.
func (b *batcher) record() *SpanRecord {
	if r := b.free.pop(); r != nil {
		return r
	}
	return new(SpanRecord)
}

// recycle resets an exported or dropped record and keeps it for a next
// span, or leaves it to the collector when a batch is kept already.
func (b *batcher) recycle(r *SpanRecord) {
	r.reset()
	b.free.push(r) // full: the collector takes it
}

// enqueue queues an ended span, or drops it (counted) when the queue is
// full and the batcher does not block, or when it is shut down.
func (b *batcher) enqueue(r *SpanRecord) {
	if b.closed.Load() {
		b.dropped.Add(1)
		b.recycle(r)
		return
	}
	if b.sync {
		b.syncMu.Lock()
		_ = b.export([]*SpanRecord{r})
		b.syncMu.Unlock()
		b.recycle(r)
		return
	}
	pos, ok := b.queue.push(r)
	for !ok {
		if !b.cfg.Blocking {
			b.dropped.Add(1)
			b.recycle(r)
			return
		}
		// Blocking (tests, benchmarks): wake the export goroutine and
		// let it run until there is room.
		b.wake()
		runtime.Gosched()
		pos, ok = b.queue.push(r)
	}
	// Every batch's worth of spans pushed, the span completing it wakes
	// the export goroutine, and an idle P takes it up while the request
	// goes on. Counting pushes reads only the ring's tail, which the
	// pushing requests share; the head, the line the export goroutine
	// writes at each record it takes, is read once a batch.
	//
	// The request yields only when more than half the queue is waiting:
	// then the export goroutine is not keeping up (every P busy), and
	// yielding lets it run before the queue fills and spans are dropped.
	// A yield at every batch would keep the request that completed it off
	// its P until an idle P's thread woke for it: 29 µs at the median on
	// a two-core virtual machine (go tool trace), 3 % of the traced
	// benchmark's time (docs/observability.md, "Cost of tracing").
	if (pos+1)%uint64(b.cfg.MaxExportBatchSize) == 0 {
		b.wake()
		if b.queue.waiting(pos+1) > uint64(b.cfg.MaxQueueSize/2) {
			runtime.Gosched()
		}
	}
}

// wake kicks the export goroutine unless a kick is pending already.
func (b *batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run exports a batch when one is full, when the schedule delay passes,
// on ForceFlush and at Shutdown.
func (b *batcher) run() {
	defer close(b.stopped)
	t := time.NewTimer(b.cfg.ScheduleDelay)
	defer t.Stop()
	batch := make([]*SpanRecord, 0, b.cfg.MaxExportBatchSize)
	for {
		select {
		case <-b.kick:
		case <-t.C:
		case reply := <-b.flushes:
			reply <- b.drain(batch)
			t.Reset(b.cfg.ScheduleDelay)
			continue
		case <-b.done:
			_ = b.drain(batch)
			return
		}
		_ = b.drain(batch) // an exporter's error is its own to report; the SDK drops it too
		t.Reset(b.cfg.ScheduleDelay)
	}
}

// drain exports what is queued, a batch at a time, returning the first
// export error.
func (b *batcher) drain(batch []*SpanRecord) error {
	var first error
	for {
		batch = batch[:0]
	fill:
		for len(batch) < cap(batch) {
			r := b.queue.pop()
			if r == nil {
				break fill
			}
			batch = append(batch, r)
		}
		if len(batch) == 0 {
			return first
		}
		if err := b.export(batch); err != nil && first == nil {
			first = err
		}
		for i, r := range batch {
			b.recycle(r)
			batch[i] = nil
		}
	}
}

// export hands one batch to every exporter, each within the export
// timeout.
func (b *batcher) export(batch []*SpanRecord) error {
	var errs []error
	for _, e := range b.exporters {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ExportTimeout)
		if err := e.ExportSpans(ctx, batch); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(errs...)
}

// forceFlush exports every span ended before the call.
func (b *batcher) forceFlush(ctx context.Context) error {
	if b.closed.Load() {
		return nil
	}
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown exports what is queued and shuts the exporters down; spans
// ended after it are dropped.
func (b *batcher) shutdown(ctx context.Context) error {
	first := false
	b.closeOnce.Do(func() {
		first = true
		b.closed.Store(true)
		close(b.done)
	})
	if !first {
		return nil
	}
	select {
	case <-b.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	var errs []error
	for _, e := range b.exporters {
		if err := e.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
