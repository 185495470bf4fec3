package local

// push appends a waiting job to its tenant's line and wakes a worker that can
// run it.
func (b *Backend) push(j *job) {
	j.tq.pushBack(j)
	b.queued(j.tq)
}

// pushFront puts a job that was handed kind capacity back at the head of its
// tenant's line.
func (b *Backend) pushFront(j *job) {
	j.tq.pushFront(j)
	b.queued(j.tq)
}

// queued lets a worker see a job just put on l: an already linked line only
// needs a wake-up, an unlinked one may now be linkable.
func (b *Backend) queued(l *tq) {
	if l.linked {
		b.wakeOne(l)
		return
	}
	b.update(l)
}

// update links l into its rings when it has a ready job and its tenant a free
// slot, and unlinks it otherwise.
func (b *Backend) update(l *tq) {
	want := l.n > 0 && b.hasSlot(l.ten)
	switch {
	case want && !l.linked:
		b.link(l)
	case !want && l.linked:
		b.unlink(l)
	}
}

// link puts l at the back of the ring of each of its lanes, and wakes a
// worker in each.
func (b *Backend) link(l *tq) {
	l.linked = true
	lanes := l.ten.lanes
	for i := range l.nodes {
		l.q.ring(lanes[i]).pushBack(&l.nodes[i])
		b.wakeLane(lanes[i])
	}
}

// unlink takes l out of its rings.
func (b *Backend) unlink(l *tq) {
	l.linked = false
	lanes := l.ten.lanes
	for i := range l.nodes {
		l.q.ring(lanes[i]).remove(&l.nodes[i])
	}
}

// updateTenant re-evaluates every line of t after its slot count changed.
func (b *Backend) updateTenant(t *tenant) {
	for _, l := range t.tqs0 {
		if l != nil {
			b.update(l)
		}
	}
	for _, l := range t.tqsMore {
		if l != nil {
			b.update(l)
		}
	}
}

// next hands worker w the next job of its lane, or nil. Queues are visited
// round-robin from w.qnext; within a queue the lane's ring is round-robin.
func (b *Backend) next(w *worker) *job {
	nq := len(b.queues)
	for i := 0; i < nq; i++ {
		qi := w.qnext + i
		if qi >= nq {
			qi -= nq
		}
		q := b.queues[qi]
		r := q.ring(w.lane)
		for r.head != nil {
			b.steps++
			nd := r.head
			l := nd.tq
			j := l.pop()
			// l is linked, so its tenant has a slot: all that can take
			// it out of the rings is its last ready job leaving, or
			// the job taking the last slot.
			if len(b.kinds) > 0 && j.kind != nil { // read j only with caps
				k := j.kind
				switch {
				case j.reserved:
					j.reserved = false
					k.reserved--
				case k.running+k.reserved >= k.limit:
					k.park(j)
					if l.n == 0 {
						b.unlink(l)
					}
					continue
				}
				k.running++
			}
			t := l.ten
			t.running++
			q.waiting--
			q.running++
			r.head = nd.next // nd to the back of the round
			switch {
			case b.maxConc > 0 && !t.shared && int(t.running) == b.maxConc:
				b.updateTenant(t) // out of slots: leave every ring
			case l.n == 0:
				b.unlink(l)
			}
			w.qnext = qi + 1
			if w.qnext == nq {
				w.qnext = 0
			}
			if r.head != nil {
				b.wakeLane(w.lane) // more work in this lane: pass it on
			}
			return j
		}
	}
	return nil
}

// finish releases what a running job held: its tenant's slot and its kind's
// capacity.
func (b *Backend) finish(j *job) {
	l := j.tq
	t := l.ten
	t.running--
	l.q.running--
	if k := j.kind; k != nil {
		k.running--
		b.unpark(k)
	}
	if b.maxConc > 0 && !t.shared && int(t.running) == b.maxConc-1 {
		b.updateTenant(t) // a slot came free: rejoin the rings
	}
}
