package console

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// The ages of the queue counts (docs/console.md, "Performance"). A count
// of every job by queue and state reads the whole table, finished jobs
// included (half a second at a million jobs), so the overview and the
// queues API read each database's last count instead:
//
//   - younger than CountsFresh: served as it is;
//   - between CountsFresh and CountsMaxAge: served as it is, and one count
//     starts in the background, so the next reader gets a fresh one;
//   - CountsMaxAge or older (or none yet): the reader waits for a count.
//
// And while the counts are read (a read in the last CountsKeepWarm), each
// count that ends schedules the next for when it turns CountsFresh old, so
// a reader who comes back every 10 s (the overview's own refresh) or every
// 30 s finds counts about 5 s old and never waits; CountsKeepWarm after
// the last read the counting stops. So no answer holds counts older than
// CountsMaxAge, and only the first read after a pause waits. A count's age
// runs from when it started, not when it ended.
const (
	CountsFresh    = 5 * time.Second
	CountsMaxAge   = 10 * time.Second
	CountsKeepWarm = time.Minute
	// CountTimeout bounds one count. It is not the request's timeout: a
	// count that outlasts the request that started it (a reader gives up
	// after Config.DatabaseTimeout) runs on and serves the next readers.
	CountTimeout = 30 * time.Second
)

// countCache holds each database's last queue count. At most one count
// per database runs at a time: readers that need one while it runs wait
// for that one (single flight).
type countCache struct {
	now func() time.Time
	// after runs f once d has passed (time.AfterFunc; tests replace it).
	after func(d time.Duration, f func())
	mu    sync.Mutex
	// entries by database name; guarded by mu.
	entries map[string]*countEntry
	// closed is set by close (guarded by mu): no count starts after it.
	closed bool
	// ctx bounds every count and ends with close; running counts the
	// counts' goroutines, which close waits for.
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// errCountsClosed answers a reader that needs a count after the console
// closed.
var errCountsClosed = errors.New("console: closed")

// countEntry is one database's cached count and the count running now.
type countEntry struct {
	depths []pgjobs.QueueDepth // shared by readers: never modified
	at     time.Time           // when the count that made depths started
	has    bool
	flight *countFlight // nil when no count runs
	// lastRead is the latest read; scheduled is true while a count is
	// scheduled to keep the entry warm.
	lastRead  time.Time
	scheduled bool
}

// countFlight is one running count; done is closed when its fields are set.
type countFlight struct {
	done   chan struct{}
	depths []pgjobs.QueueDepth
	at     time.Time
	err    error
}

func newCountCache(now func() time.Time) *countCache {
	ctx, cancel := context.WithCancel(context.Background())
	return &countCache{now: now, entries: map[string]*countEntry{}, ctx: ctx, cancel: cancel,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// get returns db's queue counts and when their count started. The slice
// is shared: callers must not modify it. ctx bounds only the wait for a
// count, not the count.
func (cc *countCache) get(ctx context.Context, db Database) ([]pgjobs.QueueDepth, time.Time, error) {
	now := cc.now()
	cc.mu.Lock()
	e := cc.entries[db.Name()]
	if e == nil {
		e = &countEntry{}
		cc.entries[db.Name()] = e
	}
	e.lastRead = now
	if age := now.Sub(e.at); e.has && age < CountsMaxAge {
		if age >= CountsFresh && e.flight == nil {
			cc.start(e, db)
		}
		d, at := e.depths, e.at
		cc.mu.Unlock()
		return d, at, nil
	}
	f := e.flight
	if f == nil {
		f = cc.start(e, db)
	}
	cc.mu.Unlock()
	select {
	case <-f.done:
		return f.depths, f.at, f.err
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
}

// start runs a count of db in its own goroutine, under CountTimeout, and
// stores it in e when it succeeds; after close it starts none and returns
// a flight that failed. Called with cc.mu held.
func (cc *countCache) start(e *countEntry, db Database) *countFlight {
	f := &countFlight{done: make(chan struct{})}
	if cc.closed {
		f.err = errCountsClosed
		close(f.done)
		return f
	}
	e.flight = f
	cc.running.Go(func() {
		at := cc.now()
		ctx, cancel := context.WithTimeout(cc.ctx, CountTimeout)
		d, err := db.Depths(ctx)
		cancel()
		cc.mu.Lock()
		f.depths, f.at, f.err = d, at, err
		e.flight = nil
		if err == nil {
			e.depths, e.at, e.has = d, at, true
			cc.keepWarm(e, db)
		}
		cc.mu.Unlock()
		close(f.done)
	})
	return f
}

// close ends the running counts, starts no more (a timer that fires later
// finds the cache closed) and waits for the counts' goroutines to return.
func (cc *countCache) close() {
	cc.mu.Lock()
	cc.closed = true
	cc.mu.Unlock()
	cc.cancel()
	cc.running.Wait()
}

// keepWarm schedules e's next count for when its count turns CountsFresh
// old, if e was read in the last CountsKeepWarm and no count is scheduled.
// Called with cc.mu held.
func (cc *countCache) keepWarm(e *countEntry, db Database) {
	now := cc.now()
	if e.scheduled || now.Sub(e.lastRead) >= CountsKeepWarm {
		return
	}
	e.scheduled = true
	cc.after(max(e.at.Add(CountsFresh).Sub(now), 0), func() {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		e.scheduled = false
		now := cc.now()
		switch {
		case e.flight != nil || now.Sub(e.lastRead) >= CountsKeepWarm:
			// A running count schedules the next when it ends; no reader:
			// stop.
		case now.Sub(e.at) < CountsFresh:
			// A reader's count came in between: wait for it to turn.
			cc.keepWarm(e, db)
		default:
			cc.start(e, db)
		}
	})
}
