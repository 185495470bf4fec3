package local

import "time"

// wallResync bounds how long now extrapolates the wall clock from one
// reading of it.
const wallResync = 100 * time.Millisecond

// now returns the clock's time, for EnqueuedAt and RunAt; it is on Insert's
// lock-free path, so it must be cheap. time.Now reads the
// wall clock and the monotonic clock, two clock_gettime calls that cost some
// 80ns in a VM, a visible part of a no-op job; with the system clock, now
// reads the monotonic clock only and adds the time elapsed to the last full
// reading, taken at most wallResync ago. The result is what time.Now would
// return except when the wall clock was stepped or slewed since that
// reading: a step shows within wallResync, a slew differs by at most its
// rate × wallResync (50µs at NTP's maximum).
func (b *Backend) now() time.Time {
	if !b.systemClock {
		return b.clock.Now()
	}
	base := b.wallBase.Load()
	if d := time.Since(*base); d >= 0 && d < wallResync {
		return base.Add(d)
	}
	t := time.Now()
	b.wallBase.Store(&t)
	return t
}
