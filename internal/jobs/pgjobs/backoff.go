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

// jobRetryLimit caps the waits of the loops that claim jobs and record
// their outcomes: once a database that was down is back, its jobs are
// claimed and their outcomes recorded within about a second, and a
// database that stays down costs each loop one attempt a second.
const jobRetryLimit = time.Second

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
