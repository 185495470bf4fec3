package local

type worker struct {
	lane      int
	nextQueue int // the queue this worker looks at first, rotating
	idle      bool
	wake      chan struct{} // capacity 1
}

// wakeWorkerFor wakes one idle worker that serves one of l's lanes. Callers hold
// mu.
func (b *Backend) wakeWorkerFor(l *tenantLine) {
	if b.idleWorkerCount.Load() == 0 {
		// No worker is parked (idleN counts at least those on the idle
		// lists): skip reading the tenant's lanes, a cache miss when all
		// workers are busy.
		return
	}
	for _, lane := range l.tenant.lanes {
		if b.wakeWorkerOfLane(lane) {
			return
		}
	}
}

// wakeWorkerOfLane wakes one idle worker of lane, reporting whether there was one.
func (b *Backend) wakeWorkerOfLane(lane int) bool {
	ws := b.idleWorkers[lane]
	n := len(ws)
	if n == 0 {
		return false
	}
	w := ws[n-1]
	ws[n-1] = nil
	b.idleWorkers[lane] = ws[:n-1]
	w.idle = false
	b.idleWorkerCount.Add(-1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

func (b *Backend) removeIdleWorker(w *worker) {
	ws := b.idleWorkers[w.lane]
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			b.idleWorkers[w.lane] = ws[:len(ws)-1]
			break
		}
	}
	w.idle = false
	b.idleWorkerCount.Add(-1)
}
