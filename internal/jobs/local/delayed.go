package local

import (
	"container/heap"
	"time"
)

// schedule parks j until at, arming the timer if at is the new earliest.
func (b *Backend) schedule(j *job, at time.Time) {
	j.runAt = at
	heap.Push(&b.sched, j)
	if b.timer == nil || at.Before(b.timerAt) {
		b.arm(at)
	}
}

func (b *Backend) arm(at time.Time) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerGen++
	gen := b.timerGen
	b.timerAt = at
	b.timer = b.clock.AfterFunc(at.Sub(b.clock.Now()), func() { b.fire(gen) })
}

// fire moves the due scheduled jobs to their lines and re-arms the timer. A
// stale timer (one that was replaced) still promotes due jobs, which is
// harmless.
func (b *Backend) fire(gen uint64) {
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
	for len(b.sched) > 0 && !b.sched[0].runAt.After(now) {
		b.push(heap.Pop(&b.sched).(*job))
	}
	if b.timer == nil && len(b.sched) > 0 {
		b.arm(b.sched[0].runAt)
	}
}

// schedHeap orders scheduled jobs by runAt, then id.
type schedHeap []*job

func (h schedHeap) Len() int { return len(h) }

func (h schedHeap) Less(i, j int) bool {
	if h[i].runAt.Equal(h[j].runAt) {
		return h[i].row.ID < h[j].row.ID
	}
	return h[i].runAt.Before(h[j].runAt)
}

func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
}

func (h *schedHeap) Push(x any) {
	*h = append(*h, x.(*job))
}

func (h *schedHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return j
}
