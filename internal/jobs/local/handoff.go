package local

import (
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
)

// stack is a lock-free LIFO of jobs (a Treiber stack) linked through next;
// the consumer takes all of it at once, so there is no ABA problem. A job is
// on a stack only when it is in no line (just inserted, or just finished).
// The Backend keeps two: the inbox of plain inserts and the finished stack
// of completed and failed jobs, so that neither Insert nor Complete has to
// wait for mu; drain applies both.
type stack struct{ head atomic.Pointer[job] }

// push adds j; it may be called from any goroutine.
func (s *stack) push(j *job) {
	for {
		h := s.head.Load()
		j.next = h
		if s.head.CompareAndSwap(h, j) {
			return
		}
	}
}

// takeAll empties the stack and returns its jobs, newest first.
func (s *stack) takeAll() *job { return s.head.Swap(nil) }

// empty reports whether nothing is waiting on the stack.
func (s *stack) empty() bool { return s.head.Load() == nil }

// lookUpHints finds, without the lock, what admit would otherwise look up
// while holding it: the job's tenant and queue when the caches have them,
// and its kind's concurrency cap. Every lookup moved here is time a drain
// does not spend holding mu.
func (b *Backend) lookUpHints(j *job, p *jobs.InsertParams) {
	if b.isolated && p.Tenant != "" {
		j.tenantHint = b.cachedTenant(p.Tenant)
	}
	if qs := b.queuesSnapshot.Load(); qs != nil && len(*qs) <= scanQueues {
		for i, q := range *qs {
			if q.name == p.Queue {
				j.queueHint = uint8(i + 1)
				break
			}
		}
	}
	if len(b.cappedKinds) > 0 { // read-only after Open
		j.kind = b.cappedKinds[p.Kind]
	}
}

// inboxBatch caps the inserts waiting on the inbox: the insert that fills a
// batch applies it. It bounds how long any drain holds the lock (workers
// busy with long jobs do not drain) while keeping the lock off the insert
// path for all but one insert in inboxBatch.
const inboxBatch = 64

// drainForIdleWorker applies the stacks at once when a worker is parked,
// since no busy worker may come to drain them (and wake it). See Claim for
// why this cannot miss a worker that is about to park.
func (b *Backend) drainForIdleWorker() {
	if b.idleWorkerCount.Load() > 0 {
		b.mu.Lock()
		b.drain()
		b.unlockAndRecycle()
	}
}

// drain applies the finished stack (releasing slots and capacity first, so
// the inserts that follow can use them), then the inbox in insertion order
// (the stack is LIFO, hence the reversal). Callers hold mu.
func (b *Backend) drain() {
	for j := b.finished.takeAll(); j != nil; {
		nx := j.next
		j.next = nil
		b.release(j)
		b.drop(j)
		j = nx
	}
	var fifo *job
	n := int32(0)
	for j := b.inbox.takeAll(); j != nil; {
		nx := j.next
		j.next = fifo
		fifo = j
		j = nx
		n++
	}
	if n > 0 {
		b.inboxLen.Add(-n)
	}
	for j := fifo; j != nil; {
		nx := j.next
		j.next = nil
		if b.status.Load() == statusOpen {
			b.admit(j, time.Time{}, time.Time{})
		}
		j = nx
	}
}

// admit files a new job under its queue and tenant, creating either if
// need be, and makes it waiting (delayed instead when runAt is after now).
// It is where every job joins the scheduling state, from the inbox or from
// a locked Insert; Insert's hints are checked here, under mu, since the
// tenant they name may have been evicted since.
func (b *Backend) admit(j *job, runAt, now time.Time) {
	var q *queue
	if h := j.queueHint; h != 0 {
		q = b.queues[h-1] // queues only grow: its index is stable
	} else {
		q = b.queue(j.row.Queue)
	}
	ten := b.sharedTenant
	if t := j.tenantHint; t != nil && !t.evicted {
		if t.idle {
			b.removeIdleTenant(t)
		}
		ten = t
	} else if b.isolated && j.row.Tenant != "" {
		ten = b.tenant(j.row.Tenant)
	}
	j.tenantHint = nil
	j.line = ten.ensureLine(q)
	ten.jobs++
	q.waiting++
	if runAt.After(now) {
		b.delayUntil(j, runAt)
	} else {
		b.makeReady(j)
	}
}
