package local

// This file chooses which job a worker runs next, and keeps the lane rings
// it chooses from up to date: a tenant line is in the rings of its tenant's
// lanes exactly while it has a ready job and its tenant a free slot.

// makeReady appends a waiting job to its tenant's line and wakes a worker
// that can run it.
func (b *Backend) makeReady(j *job) {
	j.line.pushBack(j)
	b.offerLine(j.line)
}

// makeReadyFirst puts a job that was handed kind capacity back at the head of
// its tenant's line, so it runs before the jobs that arrived after it.
func (b *Backend) makeReadyFirst(j *job) {
	j.line.pushFront(j)
	b.offerLine(j.line)
}

// offerLine lets a worker see a job just put on l: an already linked line
// only needs a wake-up, an unlinked one may now be linkable.
func (b *Backend) offerLine(l *tenantLine) {
	if l.linked {
		b.wakeWorkerFor(l)
		return
	}
	b.relink(l)
}

// relink links l into its rings when it has a ready job and its tenant a
// free slot, and unlinks it otherwise: the one rule for ring membership.
func (b *Backend) relink(l *tenantLine) {
	want := l.ready > 0 && b.hasSlot(l.tenant)
	switch {
	case want && !l.linked:
		b.link(l)
	case !want && l.linked:
		b.unlink(l)
	}
}

// link puts l at the back of the ring of each of its lanes, and wakes a
// worker in each.
func (b *Backend) link(l *tenantLine) {
	l.linked = true
	lanes := l.tenant.lanes
	for i := range int(l.nnodes) {
		l.queue.ring(lanes[i]).pushBack(l.node(i))
		b.wakeWorkerOfLane(lanes[i])
	}
}

// unlink takes l out of its rings; l's place in the round is lost, and it
// rejoins at the back.
func (b *Backend) unlink(l *tenantLine) {
	l.linked = false
	l.served = 0
	lanes := l.tenant.lanes
	for i := range int(l.nnodes) {
		l.queue.ring(lanes[i]).remove(l.node(i))
	}
}

// relinkTenant re-evaluates every line of t after its slot count changed:
// a tenant out of slots leaves the rings of every queue at once, and
// rejoins them when a slot comes free.
func (b *Backend) relinkTenant(t *tenant) {
	for _, l := range t.linesInline {
		if l != nil {
			b.relink(l)
		}
	}
	for _, l := range t.linesMore {
		if l != nil {
			b.relink(l)
		}
	}
}

// nextJob hands worker w the next job of its lane, or nil, and counts it as
// running. Queues are visited round-robin from w.nextQueue; within a queue
// the lane's ring is weighted round-robin: the head line gives its first
// job (see tenantLine.pop) and, after its tenant's weight of jobs in a
// row, moves to the back. A job whose kind is at its cap is parked on the way
// (see parking.go) and the same head is looked at again. Callers hold mu.
func (b *Backend) nextJob(w *worker) *job {
	nq := len(b.queues)
	for i := 0; i < nq; i++ {
		qi := w.nextQueue + i
		if qi >= nq {
			qi -= nq
		}
		q := b.queues[qi]
		r := q.ring(w.lane)
		for r.head != nil {
			b.headsVisited++
			nd := r.head
			l := nd.line
			t := l.tenant
			if b.limits != nil && !t.shared {
				b.refreshLimits(t)
				if !b.hasSlot(t) { // its cap was lowered: leave every ring
					t.outOfSlots = true
					b.relinkTenant(t)
					continue
				}
			}
			j := l.pop()
			// l is linked, so its tenant has a slot: all that can take
			// it out of the rings is its last ready job leaving, or
			// the job taking the last slot.
			if len(b.cappedKinds) > 0 && j.kind != nil { // read j only with caps
				k := j.kind
				switch {
				case j.reserved:
					j.reserved = false
					k.reserved--
				case k.running+k.reserved >= k.limit:
					k.park(j)
					if l.ready == 0 {
						b.unlink(l)
					}
					continue
				}
				k.running++
			}
			t.running++
			q.waiting--
			q.running++
			// A line keeps its turn for weight jobs in a row, then goes
			// to the back of the round (weighted round robin).
			if l.served++; l.served >= uint32(t.weight) {
				l.served = 0
				r.head = nd.next
			}
			switch {
			case !b.hasSlot(t):
				t.outOfSlots = true
				b.relinkTenant(t) // out of slots: leave every ring
			case l.ready == 0:
				b.unlink(l)
			}
			w.nextQueue = qi + 1
			if w.nextQueue == nq {
				w.nextQueue = 0
			}
			if r.head != nil {
				b.wakeWorkerOfLane(w.lane) // more work in this lane: pass it on
			}
			return j
		}
	}
	return nil
}

// release gives back what a running job held: its tenant's slot and its
// kind's capacity (handed on to a parked job of the kind at once). It is
// the counterpart of nextJob, for a job that completed, failed or is
// retried.
func (b *Backend) release(j *job) {
	l := j.line
	t := l.tenant
	t.running--
	l.queue.running--
	if k := j.kind; k != nil {
		k.running--
		b.unpark(k)
	}
	b.refreshLimits(t)
	if t.outOfSlots && b.hasSlot(t) {
		t.outOfSlots = false
		b.relinkTenant(t) // a slot came free: rejoin the rings
	}
}
