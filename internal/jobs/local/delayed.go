package local

import (
	"container/heap"
	"time"
)

// delayUntil holds j (already counted as waiting) on the heap of jobs not
// yet due until at, arming the timer if at is the new earliest. One timer
// serves the whole heap, so delayed jobs cost no goroutine or timer each.
func (b *Backend) delayUntil(j *job, at time.Time) {
	j.runAt = at
	heap.Push(&b.delayed, j)
	if b.timer == nil || at.Before(b.timerAt) {
		b.armTimer(at)
	}
}

// armTimer replaces the timer with one for at. Each timer carries its
// generation, so promoteDue can tell whether it is the armed one.
func (b *Backend) armTimer(at time.Time) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerGen++
	gen := b.timerGen
	b.timerAt = at
	b.timer = b.clock.AfterFunc(at.Sub(b.clock.Now()), func() { b.promoteDue(gen) })
}

// promoteDue, the timer's callback, moves the jobs now due to their lines
// and re-arms the timer for the next one. A stale timer (one that was
// replaced) still promotes due jobs, which is harmless.
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

// delayedHeap orders jobs not yet due by runAt, then id (so jobs due at the
// same time run in insertion order); it implements heap.Interface.
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
