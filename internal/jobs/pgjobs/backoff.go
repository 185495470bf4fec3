package pgjobs

import "time"

// backoff is the wait of a background loop after a failure: first, then
// doubling up to limit, and first again after a success. Every loop that
// talks to the database (fetcher, completion flush, maintenance
// connection, migrations) uses one, so a database that is down costs a
// few attempts a second, not a busy loop.
type backoff struct {
	first, limit, next time.Duration
}

func newBackoff(first, limit time.Duration) backoff {
	return backoff{first: first, limit: limit, next: first}
}

// wait sleeps the current delay and doubles the next one. It returns
// false, at once, when stop is closed first.
func (b *backoff) wait(stop <-chan struct{}) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.limit)
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// reset starts the next failure's wait from first again.
func (b *backoff) reset() { b.next = b.first }
