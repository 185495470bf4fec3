package console

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// countingDB is a Database whose Depths waits for the test's answer: each
// call sends a reply channel on calls and returns what comes back.
type countingDB struct {
	Database // the other methods: not called
	calls    chan chan countReply
	n        atomic.Int64
}

type countReply struct {
	depths []pgjobs.QueueDepth
	err    error
}

func (d *countingDB) Name() string { return "shard-0" }
func (d *countingDB) Ready() bool  { return true }
func (d *countingDB) Depths(ctx context.Context) ([]pgjobs.QueueDepth, error) {
	d.n.Add(1)
	reply := make(chan countReply)
	d.calls <- reply
	r := <-reply
	return r.depths, r.err
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = time.Unix(1_000_000, 0).Add(d)
}

// timers records what the cache schedules instead of running it.
type timers struct {
	mu  sync.Mutex
	fns []timer
}

type timer struct {
	d time.Duration
	f func()
}

func (ts *timers) after(d time.Duration, f func()) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.fns = append(ts.fns, timer{d, f})
}

// take returns and forgets the timers scheduled so far.
func (ts *timers) take() []timer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := ts.fns
	ts.fns = nil
	return out
}

// waitTimers waits (up to 10 s) for a timer to be scheduled and takes
// them: a count's end schedules its successor just after the count's
// answer is sent.
func waitTimers(ts *timers) []timer {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tm := ts.take(); len(tm) > 0 || time.Now().After(deadline) {
			return tm
		}
		time.Sleep(time.Millisecond)
	}
}

// newTestCache is a count cache on clock whose timers go to ts.
func newTestCache(clock *fakeClock, ts *timers) *countCache {
	cc := newCountCache(clock.Now)
	cc.after = ts.after
	return cc
}

type getResult struct {
	depths []pgjobs.QueueDepth
	at     time.Time
	err    error
}

// getAsync calls get in its own goroutine.
func getAsync(ctx context.Context, cc *countCache, db Database) chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		d, at, err := cc.get(ctx, db)
		ch <- getResult{d, at, err}
	}()
	return ch
}

func depthsOf(n int64) []pgjobs.QueueDepth {
	return []pgjobs.QueueDepth{{Queue: "default", Completed: n}}
}

// answer waits for the next count to start and answers it.
func answer(t *testing.T, db *countingDB, r countReply) {
	t.Helper()
	select {
	case reply := <-db.calls:
		reply <- r
	case <-time.After(10 * time.Second):
		t.Fatal("no count started")
	}
}

// result waits for a get's result.
func result(t *testing.T, ch chan getResult) getResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("get did not return")
		return getResult{}
	}
}

// TestCountCacheRegimes: with no count a reader waits for one; under
// CountsFresh it is served without a count; between CountsFresh and
// CountsMaxAge it is served at once while one count runs in the
// background (readers meanwhile start no other) and then serves the
// next readers; from CountsMaxAge readers wait for a new count, all for
// the same one.
func TestCountCacheRegimes(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(0)
	cc := newTestCache(clock, &timers{})
	db := &countingDB{calls: make(chan chan countReply)}
	ctx := context.Background()
	t0 := clock.Now()

	// None yet: the reader waits for the count.
	first := getAsync(ctx, cc, db)
	select {
	case r := <-first:
		t.Fatalf("get returned %+v before any count ended", r)
	case <-time.After(20 * time.Millisecond):
	}
	answer(t, db, countReply{depths: depthsOf(1)})
	if r := result(t, first); r.err != nil || r.depths[0].Completed != 1 || !r.at.Equal(t0) {
		t.Fatalf("first get = %+v, want count 1 from t0", r)
	}

	// Fresh: served, no count.
	clock.Set(CountsFresh - time.Millisecond)
	if d, at, err := cc.get(ctx, db); err != nil || d[0].Completed != 1 || !at.Equal(t0) {
		t.Fatalf("fresh get = %v, %v, %v", d, at, err)
	}
	if n := db.n.Load(); n != 1 {
		t.Fatalf("%d counts after a fresh read, want 1", n)
	}

	// Stale: served at once (the count below has not been answered), and
	// one count starts; readers while it runs start none.
	clock.Set(CountsFresh + time.Second)
	t1 := clock.Now()
	for range 3 {
		if d, at, err := cc.get(ctx, db); err != nil || d[0].Completed != 1 || !at.Equal(t0) {
			t.Fatalf("stale get = %v, %v, %v; want the old count at once", d, at, err)
		}
	}
	answer(t, db, countReply{depths: depthsOf(2)})
	if n := db.n.Load(); n != 2 {
		t.Fatalf("%d counts after three stale reads, want 2 (one in the background)", n)
	}
	// The background count lands; the next reader gets it without a count.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, at, err := cc.get(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Completed == 2 {
			if !at.Equal(t1) {
				t.Fatalf("background count dated %v, want its start %v", at, t1)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background count never served a reader")
		}
		time.Sleep(time.Millisecond)
	}

	// Too old: every reader waits, all for one count.
	clock.Set(CountsFresh + time.Second + CountsMaxAge)
	t2 := clock.Now()
	var waits []chan getResult
	for range 5 {
		waits = append(waits, getAsync(ctx, cc, db))
	}
	time.Sleep(20 * time.Millisecond)
	for _, w := range waits {
		select {
		case r := <-w:
			t.Fatalf("get returned %+v with counts %v old", r, CountsMaxAge)
		default:
		}
	}
	answer(t, db, countReply{depths: depthsOf(3)})
	for _, w := range waits {
		if r := result(t, w); r.err != nil || r.depths[0].Completed != 3 || !r.at.Equal(t2) {
			t.Fatalf("waiting get = %+v, want count 3", r)
		}
	}
	if n := db.n.Load(); n != 3 {
		t.Fatalf("%d counts, want 3: five waiting readers share one", n)
	}
}

// TestCountCacheErrorsAndGiveUp: a failed count is returned to the readers
// waiting for it and not cached (the next reader starts another); a reader
// whose context ends stops waiting, and the count it started runs on and
// serves the next reader.
func TestCountCacheErrorsAndGiveUp(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(0)
	cc := newTestCache(clock, &timers{})
	db := &countingDB{calls: make(chan chan countReply)}

	w := getAsync(context.Background(), cc, db)
	answer(t, db, countReply{err: errors.New("down")})
	if r := result(t, w); r.err == nil || r.depths != nil {
		t.Fatalf("get over a failed count = %+v, want its error", r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	w = getAsync(ctx, cc, db)
	var reply chan countReply
	select {
	case reply = <-db.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no count started after a failed one")
	}
	cancel()
	if r := result(t, w); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("get after its context ended = %+v, want context.Canceled", r)
	}
	reply <- countReply{depths: depthsOf(7)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, _, err := cc.get(context.Background(), db)
		if err == nil && d[0].Completed == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned count never served a reader: %v %v", d, err)
		}
		time.Sleep(time.Millisecond)
	}
	if n := db.n.Load(); n != 2 {
		t.Fatalf("%d counts, want 2", n)
	}
}

// TestCountCacheKeepsWarm: a count that ends while the counts are read
// schedules the next for when it turns CountsFresh old, so a reader who
// comes back after 10 s finds a count about 5 s old and does not wait;
// CountsKeepWarm after the last read the counting stops.
func TestCountCacheKeepsWarm(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(0)
	ts := &timers{}
	cc := newTestCache(clock, ts)
	db := &countingDB{calls: make(chan chan countReply)}
	ctx := context.Background()

	w := getAsync(ctx, cc, db)
	reply := <-db.calls // the count has started (and read its time)
	clock.Set(500 * time.Millisecond)
	reply <- countReply{depths: depthsOf(1)} // ends half a second later
	result(t, w)
	// The count ended at 0.5 s: the next is due when it turns 5 s old.
	tm := waitTimers(ts)
	if len(tm) != 1 || tm[0].d != CountsFresh-500*time.Millisecond {
		t.Fatalf("scheduled %+v, want one count in %v", tm, CountsFresh-500*time.Millisecond)
	}
	clock.Set(CountsFresh)
	tm[0].f()
	answer(t, db, countReply{depths: depthsOf(2)})

	// A reader 10 s after the first read gets the warm count at once.
	tm = waitTimers(ts)
	clock.Set(10 * time.Second)
	if d, at, err := cc.get(ctx, db); err != nil || d[0].Completed != 2 || !at.Equal(clock.t.Add(-CountsFresh)) {
		t.Fatalf("get after 10 s = %v, %v, %v; want the background count from 5 s", d, at, err)
	}
	// That read (at age 5 s) started a count; the timer scheduled by the
	// last count finds it running and leaves the scheduling to it.
	tm[0].f()
	answer(t, db, countReply{depths: depthsOf(3)})
	tm = waitTimers(ts)
	if n := db.n.Load(); n != 3 || len(tm) != 1 {
		t.Fatalf("%d counts, %d timers; want 3 counts and the next scheduled", n, len(tm))
	}

	// No reader for CountsKeepWarm: the scheduled count does not run, and
	// nothing more is scheduled.
	clock.Set(10*time.Second + CountsKeepWarm)
	tm[0].f()
	select {
	case <-db.calls:
		t.Fatal("a count ran with nobody reading")
	case <-time.After(20 * time.Millisecond):
	}
	if more := ts.take(); len(more) != 0 || db.n.Load() != 3 {
		t.Fatalf("after the readers left: %d timers, %d counts", len(more), db.n.Load())
	}
}

// stuckDB is a Database whose count runs until its context ends.
type stuckDB struct {
	Database // the other methods: not called
	started  chan struct{}
	ended    atomic.Bool
}

func (d *stuckDB) Name() string { return "shard-0" }
func (d *stuckDB) Ready() bool  { return true }
func (d *stuckDB) Depths(ctx context.Context) ([]pgjobs.QueueDepth, error) {
	close(d.started)
	<-ctx.Done()
	d.ended.Store(true)
	return nil, ctx.Err()
}

// TestCountCacheClose: a count that outlives its reader (it runs on, up to
// CountTimeout, for the next readers) is ended by close, which returns only
// when its goroutine has; after close no count starts.
func TestCountCacheClose(t *testing.T) {
	cc := newCountCache(time.Now)
	db := &stuckDB{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-db.started; cancel() }()
	if _, _, err := cc.get(ctx, db); !errors.Is(err, context.Canceled) {
		t.Fatalf("reader that gave up: %v", err)
	}
	closed := make(chan struct{})
	go func() { cc.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the running count")
	}
	if !db.ended.Load() {
		t.Fatal("close returned before the count's goroutine")
	}
	if _, _, err := cc.get(context.Background(), db); !errors.Is(err, errCountsClosed) {
		t.Fatalf("count after close: %v", err)
	}
}
