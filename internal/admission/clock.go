package admission

import (
	"sync"
	"sync/atomic"
	"time"
)

// CoarseResolution is how often the process-wide coarse clock advances.
const CoarseResolution = time.Millisecond

// Clock is the engine's time source: a cell of monotonic nanoseconds that
// the request path reads with one atomic load instead of asking the OS.
//
// There are two kinds. CoarseClock is the process-wide clock that a ticker
// goroutine advances every CoarseResolution while at least one engine with a
// rate limit uses it; NewManualClock returns a clock that moves only when a
// test calls Advance. Both are safe for concurrent use.
type Clock struct {
	ns     atomic.Int64 // nanoseconds since epoch; the request path reads only this
	_      [120]byte    // the cell is read by every P; keep writers of other fields off its line
	manual bool
	epoch  time.Time

	mu   sync.Mutex // guards refs and stop (coarse clock only)
	refs int
	stop chan struct{}
}

var coarse = &Clock{epoch: time.Now()}

// CoarseClock returns the process-wide coarse clock, the default of
// Config.Clock.
func CoarseClock() *Clock { return coarse }

// NewManualClock returns a clock that starts at zero and moves only through
// Advance. Inject it through Config.Clock so tests never sleep.
func NewManualClock() *Clock { return &Clock{manual: true} }

// Now returns the clock's current reading as time since its epoch. For the
// coarse clock this reads the OS clock (it is a control-plane call), so it is
// never behind the cell the request path reads.
func (c *Clock) Now() time.Duration {
	if c.manual {
		return time.Duration(c.ns.Load())
	}
	return time.Since(c.epoch)
}

// Advance moves a manual clock forward by d (negative d is ignored: the
// clock is monotonic). It panics on the coarse clock, which only real time
// moves.
func (c *Clock) Advance(d time.Duration) {
	if !c.manual {
		panic("admission: Advance on a clock that is not manual")
	}
	if d > 0 {
		c.ns.Add(int64(d))
	}
}

// cell returns the counter the request path reads.
func (c *Clock) cell() *atomic.Int64 { return &c.ns }

// acquire starts the coarse ticker on first use; release stops it when the
// last engine that needs it closes. Manual clocks need neither.
func (c *Clock) acquire() {
	if c.manual {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs++
	if c.refs > 1 {
		return
	}
	c.advanceTo(int64(time.Since(c.epoch)))
	stop := make(chan struct{})
	c.stop = stop
	go c.tick(stop)
}

func (c *Clock) release() {
	if c.manual {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs--
	if c.refs == 0 {
		close(c.stop)
		c.stop = nil
	}
}

func (c *Clock) tick(stop chan struct{}) {
	t := time.NewTicker(CoarseResolution)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.advanceTo(int64(time.Since(c.epoch)))
		}
	}
}

// advanceTo sets the cell to ns unless it already reads later. The cell
// follows the OS monotonic clock rather than counting ticks, so a late tick
// catches up instead of drifting, and a ticker from a previous acquire that
// is still winding down can never move it backwards.
func (c *Clock) advanceTo(ns int64) {
	for {
		cur := c.ns.Load()
		if cur >= ns || c.ns.CompareAndSwap(cur, ns) {
			return
		}
	}
}
