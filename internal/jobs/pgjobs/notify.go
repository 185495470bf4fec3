package pgjobs

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
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
	// tenants have jobs made ready since the last NOTIFY, which names
	// them (notifyPayload): fair claimers in every process give them
	// turns at once instead of at their next look.
	tenants map[string]struct{}
	// txTenants have jobs written in callers' transactions, which commit
	// when the backend does not see: every NOTIFY names them until the
	// last of txNotifyDelays has passed.
	txTenants map[string]time.Time
}

// notifyPayloadMax bounds a NOTIFY's list of tenants (PostgreSQL takes
// up to 8,000 bytes); a longer list is sent as no list, which tells the
// listeners to look for themselves.
const notifyPayloadMax = 4000

// readied notes tenants with jobs made ready (committed), for the next
// NOTIFY.
func (b *DB) readied(tenants ...string) {
	b.ntf.mu.Lock()
	for _, t := range tenants {
		b.readiedLocked(t)
	}
	b.ntf.mu.Unlock()
}

// readiedLocked is readied for one tenant. b.ntf.mu must be held.
func (b *DB) readiedLocked(tenant string) {
	if b.ntf.tenants == nil {
		b.ntf.tenants = make(map[string]struct{})
	}
	b.ntf.tenants[tenant] = struct{}{}
}

// notifyPayload is the JSON array of tenants ("[]" for none: a retry or
// a rescue, whose jobs the claim that makes them ready names), or "" when
// it would be longer than notifyPayloadMax.
func notifyPayload(tenants []string) string {
	if len(tenants) == 0 {
		return "[]"
	}
	out, err := json.Marshal(tenants)
	if err != nil || len(out) > notifyPayloadMax {
		return ""
	}
	return string(out)
}

// news is what the fetcher has heard of since its last claim: tenants
// with jobs made ready (a set: a fetcher waiting for its workers hears on,
// and holds each tenant once), or (look) that some were, unnamed.
type news struct {
	mu      sync.Mutex
	tenants map[string]struct{}
	look    bool
}

// heard takes in a NOTIFY's payload on cellgate_jobs (notifyPayload's
// list, or "": look). Only fair claims use it.
func (b *DB) heard(payload string) {
	if !b.fair {
		return
	}
	var list []string
	if !strings.HasPrefix(payload, "[") || json.Unmarshal([]byte(payload), &list) != nil {
		b.news.mu.Lock()
		b.news.look = true
		b.news.mu.Unlock()
		return
	}
	b.hear(list)
}

// hear adds tenants with ready jobs to the news (fair claims only).
func (b *DB) hear(tenants []string) {
	if !b.fair || len(tenants) == 0 {
		return
	}
	b.news.mu.Lock()
	if b.news.tenants == nil {
		b.news.tenants = make(map[string]struct{})
	}
	for _, t := range tenants {
		b.news.tenants[t] = struct{}{}
	}
	b.news.mu.Unlock()
}

// takeNews empties the news.
func (b *DB) takeNews() (tenants []string, look bool) {
	b.news.mu.Lock()
	defer b.news.mu.Unlock()
	tenants, look = slices.Collect(maps.Keys(b.news.tenants)), b.news.look
	clear(b.news.tenants)
	b.news.look = false
	return tenants, look
}

// notifyNow asks for a NOTIFY as soon as possible (coalesced with others).
func (b *DB) notifyNow() {
	signal(b.wake) // this process's fetcher needs no round trip
	b.ntf.mu.Lock()
	b.ntf.now = true
	b.ntf.mu.Unlock()
	signal(b.ntf.kick)
}

// notifyAfterTx arms the delayed NOTIFYs for jobs of tenants written in a
// caller's transaction, which name the tenants. An armed delay is never
// postponed, so a steady stream of enqueues still notifies every few
// milliseconds.
func (b *DB) notifyAfterTx(tenants ...string) {
	now := time.Now()
	b.ntf.mu.Lock()
	if b.ntf.txTenants == nil {
		b.ntf.txTenants = make(map[string]time.Time)
	}
	for _, t := range tenants {
		b.ntf.txTenants[t] = now.Add(txNotifyDelays[len(txNotifyDelays)-1])
	}
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
			// The tenants named by the requests this NOTIFY answers,
			// those made during the gap too.
			b.ntf.mu.Lock()
			at := time.Now()
			for t, until := range b.ntf.txTenants {
				if at.After(until) {
					delete(b.ntf.txTenants, t)
				} else {
					b.readiedLocked(t)
				}
			}
			named := slices.Collect(maps.Keys(b.ntf.tenants))
			payload := notifyPayload(named)
			clear(b.ntf.tenants)
			b.ntf.mu.Unlock()
			// This process's fetcher hears them without the round trip,
			// and without waiting for the listening connection, which the
			// maintenance leader also vacuums on.
			b.hear(named)
			last = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := b.pool.Exec(ctx, sqlNotify, payload)
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
