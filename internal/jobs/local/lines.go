package local

import "github.com/cellgate/cellgate/internal/jobs"

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
//
// Priorities: jobs of priority 1 (the default) are in first; a tenant that
// enqueues jobs of a later priority gets a lineExtra with a buffer per
// priority, and pop takes the first job of the first priority that has
// one. So priority orders a tenant's own jobs, and the line's turns in the
// round robin, which decide between tenants, are unchanged.
type tenantLine struct {
	inline [2]ringNode // nodes of a tenant with 1 or 2 lanes
	tenant *tenant
	first  jobRing // ready jobs of priority 1
	queue  *queue
	extra  *lineExtra // nodes beyond inline, buffers of later priorities; nil for most lines
	ready  uint32     // ready jobs, every priority
	served uint32     // jobs taken in the line's current turn (see nextJob)
	nnodes uint8      // nodes, one per lane of the tenant
	linked bool       // the nodes are in their rings
	_      [14]byte   // to 128 bytes
}

// lineExtra is what few lines need: the ring nodes of a tenant with more
// than two lanes, and the buffers of priorities 2 to 4.
type lineExtra struct {
	nodes []ringNode
	later [jobs.PriorityLowest - 1]jobRing
	n     uint32 // jobs in later
}

// node returns the line's node in the ring of lane tenant.lanes[i].
func (l *tenantLine) node(i int) *ringNode {
	if l.extra != nil && l.extra.nodes != nil {
		return &l.extra.nodes[i]
	}
	return &l.inline[i]
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
	l := &tenantLine{tenant: t, queue: q, nnodes: uint8(len(t.lanes))}
	if len(t.lanes) > len(l.inline) {
		// Most tenants have 1 or 2 lanes: their ring nodes are in the
		// line's own allocation, one cache miss fewer per claim.
		l.extra = &lineExtra{nodes: make([]ringNode, len(t.lanes))}
	}
	for i := range int(l.nnodes) {
		l.node(i).line = l
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

// pushBack appends j to the line, behind the jobs of its priority.
func (l *tenantLine) pushBack(j *job) {
	l.ring(j).pushBack(j)
	l.ready++
}

// pushFront puts j first among the jobs of its priority.
func (l *tenantLine) pushFront(j *job) {
	l.ring(j).pushFront(j)
	l.ready++
}

// ring returns the buffer of j's priority, making the line's lineExtra
// for its first job of a priority after 1.
func (l *tenantLine) ring(j *job) *jobRing {
	if j.prio <= 1 {
		return &l.first
	}
	if l.extra == nil {
		l.extra = &lineExtra{}
	}
	l.extra.n++
	return &l.extra.later[j.prio-2]
}

// pop takes the first job of the first priority of a line that has one.
func (l *tenantLine) pop() *job {
	l.ready--
	if l.first.n > 0 {
		return l.first.pop()
	}
	x := l.extra
	x.n--
	for i := range x.later {
		if x.later[i].n > 0 {
			return x.later[i].pop()
		}
	}
	panic("local: pop from an empty line")
}

// jobRing is a FIFO of jobs in a ring buffer.
type jobRing struct {
	buf  []*job // its length is 0 or a power of two
	head uint32 // index in buf of the oldest job
	n    uint32 // jobs
}

func (r *jobRing) pushBack(j *job) {
	if int(r.n) == len(r.buf) {
		r.resize(max(minLineBuf, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)&uint32(len(r.buf)-1)] = j
	r.n++
}

func (r *jobRing) pushFront(j *job) {
	if int(r.n) == len(r.buf) {
		r.resize(max(minLineBuf, 2*len(r.buf)))
	}
	r.head = (r.head - 1) & uint32(len(r.buf)-1)
	r.buf[r.head] = j
	r.n++
}

// pop takes the oldest job of a ring that has one. The buffer halves when a
// quarter of it is in use, so a burst does not pin its memory; growing and
// shrinking copy at most as many jobs as were pushed or popped since the
// last resize, so each costs O(1) amortised.
func (r *jobRing) pop() *job {
	j := r.buf[r.head]
	r.buf[r.head] = nil // no stale pointer for the collector to follow
	r.head = (r.head + 1) & uint32(len(r.buf)-1)
	r.n--
	if len(r.buf) > minLineBuf && int(r.n) < len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
	return j
}

// resize moves the ring's jobs to a buffer of length c (a power of two, at
// least r.n).
func (r *jobRing) resize(c int) {
	buf := make([]*job, c)
	mask := uint32(len(r.buf) - 1)
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)&mask]
	}
	r.buf, r.head = buf, 0
}
