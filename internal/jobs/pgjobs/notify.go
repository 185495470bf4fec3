package pgjobs

import (
	"context"
	"sync"
	"time"
)

// NOTIFY is sent by the notifier, never inside a transaction that writes:
// PostgreSQL makes a transaction that notifies hold a cluster-wide lock
// from pre-commit until its commit record is flushed, which would serialize
// the commits of every enqueue (measured: 4× fewer commits per second at 8
// concurrent enqueuers). A statement that only notifies has no transaction
// id, writes no WAL and holds the lock for microseconds.
//
// A job committed by this backend (plain enqueue, retry, rescue) is
// notified at once. A job written in a caller's transaction commits when
// the caller commits, which the backend does not see, so it is notified
// after each of txNotifyDelays; a transaction that commits later still is
// found by the poll (Config.PollInterval).
var txNotifyDelays = [...]time.Duration{5 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond}

// notifyGap is the least time between two NOTIFYs of one backend. Under load
// every inserted batch asks for one; what they say (there is work) needs
// saying once per gap, and each costs a statement here and a wake-up in
// every listening process. This process's own fetcher is woken at once.
const notifyGap = 5 * time.Millisecond

type notifier struct {
	mu   sync.Mutex
	now  bool
	at   [len(txNotifyDelays)]time.Time // zero: not armed
	kick chan struct{}
}

// notifyNow asks for a NOTIFY as soon as possible (coalesced with others).
func (b *DB) notifyNow() {
	signal(b.wake) // this process's fetcher needs no round trip
	b.ntf.mu.Lock()
	b.ntf.now = true
	b.ntf.mu.Unlock()
	signal(b.ntf.kick)
}

// notifyAfterTx arms the delayed NOTIFYs for a job written in a caller's
// transaction. An armed delay is never postponed, so a steady stream of
// enqueues still notifies every few milliseconds.
func (b *DB) notifyAfterTx() {
	now := time.Now()
	b.ntf.mu.Lock()
	for i, d := range txNotifyDelays {
		if b.ntf.at[i].IsZero() {
			b.ntf.at[i] = now.Add(d)
		}
	}
	b.ntf.mu.Unlock()
	signal(b.ntf.kick)
}

// notifyLoop sends the NOTIFYs that are due, one statement for all of them.
func (b *DB) notifyLoop() {
	defer b.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var last time.Time
	for {
		b.ntf.mu.Lock()
		now := time.Now()
		due := b.ntf.now
		b.ntf.now = false
		var next time.Time
		for i, at := range b.ntf.at {
			switch {
			case at.IsZero():
			case !at.After(now):
				due = true
				b.ntf.at[i] = time.Time{}
			case next.IsZero() || at.Before(next):
				next = at
			}
		}
		b.ntf.mu.Unlock()
		if due {
			// This process's workers need no round trip.
			signal(b.wake)
			if gap := notifyGap - time.Since(last); gap > 0 {
				// Requests made meanwhile share this NOTIFY.
				t.Reset(gap)
				select {
				case <-t.C:
				case <-b.quit:
					return
				}
				b.ntf.mu.Lock()
				b.ntf.now = false
				b.ntf.mu.Unlock()
			}
			last = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := b.pool.Exec(ctx, sqlNotify)
			cancel()
			if err != nil {
				b.logErr("notify", "pgjobs: NOTIFY failed; other processes find the job at their next poll", err)
			}
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-b.ntf.kick:
		case <-t.C:
		case <-b.quit:
			return
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}
