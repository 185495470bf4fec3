package local

// queue is one queue's scheduling state: its job counters (for Stats) and,
// per lane, the ring of the tenant lines that can be served from it. The
// counters and the head of each lane's ring, which every claim writes,
// share a cache line (a 128-byte object, so aligned) for up to
// len(ringsInline) lanes.
type queue struct {
	waiting     int
	running     int
	ringsInline [4]ring // rings of lanes 0-3
	index       int     // in Backend.queues, which only grows
	_           [8]byte
	name        string
	ringsMore   []ring // rings of lanes 4 and up
	_           [24]byte
}

// ring returns the ring of lane.
func (q *queue) ring(lane int) *ring {
	if lane < len(q.ringsInline) {
		return &q.ringsInline[lane]
	}
	return &q.ringsMore[lane-len(q.ringsInline)]
}

// queue returns the queue named name, creating it. An app has a handful of
// queues, and a job's queue name is its kind's spec string, so a scan whose
// comparisons mostly stop at the string pointers is cheaper than hashing.
// A new queue is also published in queuesSnapshot for Insert's lock-free
// lookup (see lookUpHints).
func (b *Backend) queue(name string) *queue {
	if len(b.queues) <= scanQueues {
		for _, q := range b.queues {
			if q.name == name {
				return q
			}
		}
	} else if q := b.queuesByName[name]; q != nil {
		return q
	}
	q := &queue{name: name, index: len(b.queues)}
	if b.numLanes > len(q.ringsInline) {
		q.ringsMore = make([]ring, b.numLanes-len(q.ringsInline))
	}
	b.queues = append(b.queues, q)
	b.queuesByName[name] = q
	qs := append([]*queue(nil), b.queues...) // published: never modified
	b.queuesSnapshot.Store(&qs)
	return q
}

// scanQueues is the number of queues up to which queue scans them.
const scanQueues = 8

// ringNode is a tenant line's membership in the ring of one lane.
type ringNode struct {
	prev, next *ringNode
	line       *tenantLine
}

// ring is a circular doubly linked list of ring nodes: the round robin of a
// lane in a queue. head is the member served next and head.prev the last.
// Serving the head and moving it to the back is then one step,
// head = head.next, which writes no other node.
type ring struct{ head *ringNode }

// pushBack makes n the last member of the round.
func (r *ring) pushBack(n *ringNode) {
	h := r.head
	if h == nil {
		n.prev, n.next = n, n
		r.head = n
		return
	}
	last := h.prev
	n.prev, n.next = last, h
	last.next = n
	h.prev = n
}

// remove takes n out of the round; when n was the head, the member after it
// is served next.
func (r *ring) remove(n *ringNode) {
	if n.next == n {
		r.head = nil
	} else {
		n.prev.next = n.next
		n.next.prev = n.prev
		if r.head == n {
			r.head = n.next
		}
	}
	n.prev, n.next = nil, nil
}
