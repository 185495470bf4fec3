package local

// worker is the state of one worker index (Claim's argument). A worker with
// nothing to run parks in Claim on its own wake channel, listed in
// Backend.idleWorkers under its lane, so that new work wakes only a worker
// that can take it rather than every parked one.
type worker struct {
	lane      int           // the lane it serves: its index % Backend.numLanes
	nextQueue int           // the queue this worker looks at first, rotating
	idle      bool          // on Backend.idleWorkers; cleared by whoever takes it off
	wake      chan struct{} // capacity 1
}

// wakeWorkerFor wakes one idle worker that serves one of l's lanes. Callers
// hold mu.
func (b *Backend) wakeWorkerFor(l *tenantLine) {
	if b.idleWorkerCount.Load() == 0 {
		// No worker is parked (idleWorkerCount counts at least those on
		// the idle lists): skip reading the tenant's lanes, a cache miss
		// when all workers are busy.
		return
	}
	for _, lane := range l.tenant.lanes {
		if b.wakeWorkerOfLane(lane) {
			return
		}
	}
}

// wakeWorkerOfLane wakes one idle worker of lane, reporting whether there
// was one. The wake-up is a token on a channel of capacity 1, so it is not
// lost if the worker has not reached its select yet. Callers hold mu.
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

// removeIdleWorker takes w off its lane's idle list when its Claim gives up
// (its context ended) before a wake-up. Callers hold mu.
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
