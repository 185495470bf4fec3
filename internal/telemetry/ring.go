package telemetry

import "sync/atomic"

// ring is a bounded multi-producer, multi-consumer queue of records
// (Dmitry Vyukov's bounded MPMC queue): a push or a pop is one
// compare-and-swap on its index and two atomic loads/stores on its cell,
// no lock, so a span's End does not serialize with other requests on a
// mutex the way a channel send does.
type ring struct {
	mask uint64
	_    [56]byte // head and tail on cache lines of their own
	head atomic.Uint64
	_    [56]byte
	tail atomic.Uint64
	_    [56]byte
	cell []ringCell
}

type ringCell struct {
	// seq is the cell's turn: pos when free for the push at pos, pos+1
	// when holding the record pushed at pos.
	seq atomic.Uint64
	r   *SpanRecord
}

// newRing holds at least n records (a power of two).
func newRing(n int) *ring {
	size := 1
	for size < n {
		size <<= 1
	}
	q := &ring{mask: uint64(size - 1), cell: make([]ringCell, size)}
	for i := range q.cell {
		q.cell[i].seq.Store(uint64(i))
	}
	return q
}

// push adds r, reporting false when the ring is full, and otherwise how
// many records were pushed before it, ever.
func (q *ring) push(r *SpanRecord) (uint64, bool) {
	pos := q.tail.Load()
	for {
		c := &q.cell[pos&q.mask]
		seq := c.seq.Load()
		switch {
		case seq == pos:
			if q.tail.CompareAndSwap(pos, pos+1) {
				c.r = r
				c.seq.Store(pos + 1)
				return pos, true
			}
			pos = q.tail.Load()
		case seq < pos:
			return 0, false // the cell still holds the record of a lap ago
		default:
			pos = q.tail.Load()
		}
	}
}

// pop takes the oldest record, or nil when the ring is empty.
func (q *ring) pop() *SpanRecord {
	pos := q.head.Load()
	for {
		c := &q.cell[pos&q.mask]
		seq := c.seq.Load()
		switch {
		case seq == pos+1:
			if q.head.CompareAndSwap(pos, pos+1) {
				r := c.r
				c.r = nil
				c.seq.Store(pos + q.mask + 1)
				return r
			}
			pos = q.head.Load()
		case seq < pos+1:
			return nil
		default:
			pos = q.head.Load()
		}
	}
}

// waiting is how many of the records pushed before position pushed are
// still in the ring: 0 once pops have passed them all. It reads the head,
// the line the consumers write at every pop.
func (q *ring) waiting(pushed uint64) uint64 {
	if head := q.head.Load(); head < pushed {
		return pushed - head
	}
	return 0
}
