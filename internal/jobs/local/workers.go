package local

type worker struct {
	lane  int
	qnext int // the queue this worker looks at first, rotating
	idle  bool
	wake  chan struct{} // capacity 1
}

// wakeOne wakes one idle worker that serves one of l's lanes. Callers hold
// mu.
func (b *Backend) wakeOne(l *tq) {
	if b.idleN.Load() == 0 {
		// No worker is parked (idleN counts at least those on the idle
		// lists): skip reading the tenant's lanes, a cache miss when all
		// workers are busy.
		return
	}
	for _, lane := range l.ten.lanes {
		if b.wakeLane(lane) {
			return
		}
	}
}

// wakeLane wakes one idle worker of lane, reporting whether there was one.
func (b *Backend) wakeLane(lane int) bool {
	ws := b.idle[lane]
	n := len(ws)
	if n == 0 {
		return false
	}
	w := ws[n-1]
	ws[n-1] = nil
	b.idle[lane] = ws[:n-1]
	w.idle = false
	b.idleN.Add(-1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

func (b *Backend) removeIdle(w *worker) {
	ws := b.idle[w.lane]
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			b.idle[w.lane] = ws[:len(ws)-1]
			break
		}
	}
	w.idle = false
	b.idleN.Add(-1)
}
