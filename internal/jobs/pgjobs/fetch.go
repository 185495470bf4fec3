package pgjobs

import (
	"context"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// The fetcher: one goroutine per DB claims jobs for the workers, one
// claim in flight at a time. A claim takes a job for every worker waiting
// in Claim plus a prefetch: as many jobs as the workers asked for while the
// previous claim was in flight (at most Config.Prefetch, one per worker by
// default; it decays by a quarter per claim when they ask for fewer). Busy
// workers of short jobs then find their next job in the stash instead of
// waiting a round trip each, and one claim serves many of them, which is
// what makes a claim cheap per job: its fixed cost (a statement, a
// transaction, a plpgsql call) is many times the cost of one more row.
// Workers of long jobs ask for little while a claim is in flight, so
// little is prefetched and jobs are not held back from other processes'
// idle workers. Stashed jobs are 'running' in the table: they get
// heartbeats, count toward per-kind caps, and Close hands them back.
//
// A single fetcher also keeps a backend's claims from racing each other:
// two claims in flight read the same head of the claim order and skip each
// other's locked rows. (Measured with two: more CPU per job and
// fewer jobs per second, in both claim orders.)

// jobStash is a FIFO of claimed jobs that no worker has taken yet.
type jobStash struct {
	rows []*jobs.JobRow
	head int
}

func (s *jobStash) len() int { return len(s.rows) - s.head }

func (s *jobStash) push(r *jobs.JobRow) { s.rows = append(s.rows, r) }

// pop returns the oldest job, or nil.
func (s *jobStash) pop() *jobs.JobRow {
	if s.head == len(s.rows) {
		return nil
	}
	r := s.rows[s.head]
	s.rows[s.head] = nil
	s.head++
	if s.head == len(s.rows) {
		s.rows, s.head = s.rows[:0], 0
	}
	return r
}

// drain empties the stash and returns its jobs.
func (s *jobStash) drain() []*jobs.JobRow {
	out := append([]*jobs.JobRow(nil), s.rows[s.head:]...)
	clear(s.rows)
	s.rows, s.head = s.rows[:0], 0
	return out
}

// flightMark records, when a claim is sent, what the prefetch estimate is
// measured against when it lands.
type flightMark struct {
	returned uint64
}

// wantLocked is how many jobs to claim now: enough for every waiting worker
// plus the prefetch when a worker waits, else a top-up once the stash (and
// the claims in flight) fell below half the prefetch. b.mu must be held.
func (b *DB) wantLocked() int {
	have := b.stash.len() + b.reserved
	var n int
	if waiting := len(b.queue); waiting > 0 {
		n = waiting + b.prefetch - have
	} else if b.lowLocked() {
		n = b.prefetch - have
	}
	return min(max(n, 0), b.cfg.ClaimBatch)
}

// lowLocked reports whether the stash needs a top-up. b.mu must be held.
func (b *DB) lowLocked() bool {
	return 2*(b.stash.len()+b.reserved) < b.prefetch
}

// landedLocked ends the reservation of a claim of n jobs sent at mark and
// sets the prefetch to the jobs the workers asked for meanwhile, or lets
// it decay by a quarter if they asked for fewer: one quick round trip must
// not shrink the next claims to a few jobs each. Only workers back from a
// job count: a worker's first Claim (at start) says nothing of how fast
// jobs finish, and counting it would claim ahead of workers that are about
// to be busy for a long time (TestLongJobsAreNotPrefetched). b.mu must be
// held, and the claim's jobs not handed out yet.
func (b *DB) landedLocked(n int, mark flightMark) {
	b.reserved -= n
	asked := int(b.returned - mark.returned)
	b.prefetch = min(max(asked, b.prefetch-(b.prefetch+3)/4, 0), b.maxPrefetch)
}

// fetchLoop claims jobs while workers want them, until Close.
func (b *DB) fetchLoop() {
	defer b.wg.Done()
	select {
	case <-b.ready:
	case <-b.quit:
		return
	}
	poll := time.NewTimer(b.cfg.PollInterval)
	defer poll.Stop()
	retry := newBackoff(50*time.Millisecond, jobRetryLimit)
	for {
		if len(b.lostClaims) > 0 {
			// Before claiming again: a claim whose answer was lost.
			if err := b.releaseLostNow(); err != nil {
				b.logErr("claim", "pgjobs: claiming jobs failed; retrying", err)
				if !retry.wait(b.quit) {
					return
				}
				continue
			}
		}
		b.mu.Lock()
		n := b.wantLocked()
		b.reserved += n
		mark := flightMark{returned: b.returned}
		b.mu.Unlock()
		if n == 0 {
			select {
			case <-b.demand:
				continue
			case <-b.quit:
				return
			}
		}
		// Signals from here on mean work that this claim may not see.
		select {
		case <-b.wake:
		default:
		}
		got, err := b.claimBatch(n, mark)
		if err != nil {
			b.logErr("claim", "pgjobs: claiming jobs failed; retrying", err)
			if !retry.wait(b.quit) {
				return
			}
			continue
		}
		retry.reset()
		if got > 0 || b.fair && b.turns.again() {
			// A short batch does not prove the table is drained: jobs of a
			// kind at its cap are trimmed. Only an empty claim does, unless
			// the tenants it named ran dry while the turns hold others.
			continue
		}
		// Nothing more to claim now: wait for news, or for the end of the
		// first tenant's rest.
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(b.pollWait())
		select {
		case <-b.wake:
		case <-poll.C:
		case <-b.quit:
			return
		}
	}
}

// pollWait is how long the fetcher waits for news after a claim that
// took nothing: the poll interval, or less while a tenant rests.
func (b *DB) pollWait() time.Duration {
	wait := b.cfg.PollInterval
	if !b.fair {
		return wait
	}
	b.mu.Lock()
	end, ok := b.turns.restEnd(b.roomOfLocked)
	b.mu.Unlock()
	if ok {
		wait = min(wait, max(end.Sub(b.now()), 0))
	}
	return wait
}

// releaseLostNow is releaseLost on the fetcher's own deadline.
func (b *DB) releaseLostNow() error {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	return b.releaseLost(ctx)
}
