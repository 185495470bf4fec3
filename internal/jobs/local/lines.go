package local

// tenantLine is a tenant's line of ready jobs in one queue and its ring
// memberships: the unit the round robin serves. While the line is linked,
// each of its nodes is a member of the ring of one of the tenant's lanes in
// the queue, so every worker of those lanes takes turns at it (see
// scheduler.go). It is a 128-byte object (so aligned), two adjacent cache
// lines (for a tenant with 1 or 2 lanes; more lanes have their nodes apart).
//
// The line is a ring buffer of pointers to its jobs rather than a list
// linked through them: appending a job then does not write to the previous
// one, and taking one does not read it, which for a tenant whose jobs went
// cold in a long backlog are cache misses under the lock.
type tenantLine struct {
	inline [2]ringNode // nodes of a tenant with 1 or 2 lanes
	tenant *tenant
	head   uint32 // index in buf of the oldest ready job
	ready  uint32 // ready jobs
	buf    []*job // ring buffer; its length is 0 or a power of two
	queue  *queue
	nodes  []ringNode // node i is in the ring of lane tenant.lanes[i]
	linked bool       // the nodes are in their rings
	_      [7]byte    // to 128 bytes
}

// lineAt returns the tenant's line in the queue of index qi, or nil when the
// tenant has had no job in that queue.
func (t *tenant) lineAt(qi int) *tenantLine {
	if qi < len(t.linesInline) {
		return t.linesInline[qi]
	}
	if qi -= len(t.linesInline); qi < len(t.linesMore) {
		return t.linesMore[qi]
	}
	return nil
}

// ensureLine returns the tenant's line in q, creating it (unlinked) on the
// tenant's first job in q. Lines stay until the tenant is evicted, so a
// tenant that comes back does not rebuild them.
func (t *tenant) ensureLine(q *queue) *tenantLine {
	if l := t.lineAt(q.index); l != nil {
		return l
	}
	l := &tenantLine{tenant: t, queue: q}
	if len(t.lanes) <= len(l.inline) {
		// Most tenants have 1 or 2 lanes: keep their ring nodes in the
		// line's own allocation, one cache miss fewer per claim.
		l.nodes = l.inline[:len(t.lanes)]
	} else {
		l.nodes = make([]ringNode, len(t.lanes))
	}
	for i := range l.nodes {
		l.nodes[i].line = l
	}
	if q.index < len(t.linesInline) {
		t.linesInline[q.index] = l
	} else {
		for len(t.linesMore) <= q.index-len(t.linesInline) {
			t.linesMore = append(t.linesMore, nil)
		}
		t.linesMore[q.index-len(t.linesInline)] = l
	}
	return l
}

// minLineBuf is the smallest length of a line's buffer, and the length it
// shrinks back to.
const minLineBuf = 4

// pushBack appends j to the line.
func (l *tenantLine) pushBack(j *job) {
	if int(l.ready) == len(l.buf) {
		l.resize(max(minLineBuf, 2*len(l.buf)))
	}
	l.buf[(l.head+l.ready)&uint32(len(l.buf)-1)] = j
	l.ready++
}

// pushFront puts j first in the line.
func (l *tenantLine) pushFront(j *job) {
	if int(l.ready) == len(l.buf) {
		l.resize(max(minLineBuf, 2*len(l.buf)))
	}
	l.head = (l.head - 1) & uint32(len(l.buf)-1)
	l.buf[l.head] = j
	l.ready++
}

// pop takes the oldest job of a line that has one. The buffer halves when a
// quarter of it is in use, so a burst does not pin its memory; growing and
// shrinking copy at most as many jobs as were pushed or popped since the
// last resize, so each costs O(1) amortised.
func (l *tenantLine) pop() *job {
	j := l.buf[l.head]
	l.buf[l.head] = nil // no stale pointer for the collector to follow
	l.head = (l.head + 1) & uint32(len(l.buf)-1)
	l.ready--
	if len(l.buf) > minLineBuf && int(l.ready) < len(l.buf)/4 {
		l.resize(len(l.buf) / 2)
	}
	return j
}

// resize moves the line's jobs to a buffer of length c (a power of two, at
// least l.ready).
func (l *tenantLine) resize(c int) {
	buf := make([]*job, c)
	mask := uint32(len(l.buf) - 1)
	for i := range l.ready {
		buf[i] = l.buf[(l.head+i)&mask]
	}
	l.buf, l.head = buf, 0
}
