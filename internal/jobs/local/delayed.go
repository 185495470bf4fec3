package local

import (
	"container/heap"
	"time"
)

// delayUntil parks j until at, arming the timer if at is the new earliest.
func (b *Backend) delayUntil(j *job, at time.Time) {
	j.runAt = at
	heap.Push(&b.delayed, j)
	if b.timer == nil || at.Before(b.timerAt) {
		b.armTimer(at)
	}
}

func (b *Backend) armTimer(at time.Time) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerGen++
	gen := b.timerGen
	b.timerAt = at
	b.timer = b.clock.AfterFunc(at.Sub(b.clock.Now()), func() { b.promoteDue(gen) })
}

// promoteDue moves the due scheduled jobs to their lines and re-arms the timer. A
// stale timer (one that was replaced) still promotes due jobs, which is
// harmless.
func (b *Backend) promoteDue(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.status.Load() != statusOpen {
		return
	}
	b.drain()
	if gen == b.timerGen {
		b.timer = nil
	}
	now := b.clock.Now()
	for len(b.delayed) > 0 && !b.delayed[0].runAt.After(now) {
		b.makeReady(heap.Pop(&b.delayed).(*job))
	}
	if b.timer == nil && len(b.delayed) > 0 {
		b.armTimer(b.delayed[0].runAt)
	}
}

// delayedHeap orders scheduled jobs by runAt, then id.
type delayedHeap []*job

func (h delayedHeap) Len() int { return len(h) }

func (h delayedHeap) Less(i, j int) bool {
	if h[i].runAt.Equal(h[j].runAt) {
		return h[i].row.ID < h[j].row.ID
	}
	return h[i].runAt.Before(h[j].runAt)
}

func (h delayedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
}

func (h *delayedHeap) Push(x any) {
	*h = append(*h, x.(*job))
}

func (h *delayedHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return j
}
