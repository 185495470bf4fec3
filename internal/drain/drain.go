// Package drain tells a move when no request routed by a replaced map can
// still be in flight: each map version carries a Counter its requests
// enter and leave, and a Retired list keeps the replaced maps' counters
// until they reach zero. The router (slot maps between cells) and a cell
// (shard maps between its shards) both report it before a move fences the
// source.
package drain

import (
	"sync"
	"sync/atomic"
)

// Counter counts the requests in flight on one map version. It is written
// by every request, so it is padded to a cache line of its own: the map
// it sits in is otherwise only read. The zero value is ready.
type Counter struct {
	_ [64]byte
	n atomic.Int64
	_ [56]byte
}

// Enter counts a request that started on the map; Leave ends it.
func (c *Counter) Enter() { c.n.Add(1) }

// Leave ends a request Enter counted.
func (c *Counter) Leave() { c.n.Add(-1) }

// InFlight is how many requests entered and have not left.
func (c *Counter) InFlight() int64 { return c.n.Load() }

// Retired holds the counters of replaced maps that may still have
// requests in flight. Its methods take a lock: they run on map changes and
// on a move's polls, never per request. The zero value is ready.
type Retired struct {
	mu   sync.Mutex
	list []*Counter
}

// Add records the counter of a map that was just replaced (nil is
// ignored: the first map replaces none).
func (r *Retired) Add(c *Counter) {
	if c == nil {
		return
	}
	r.mu.Lock()
	r.list = append(r.list, c)
	r.mu.Unlock()
}

// InFlight returns how many requests that started on a replaced map are
// still in flight, and forgets the maps that have none. No request starts
// on a map once it is replaced, bar one that loaded it an instant before
// the swap and has not entered yet, which a move's fence at the source
// covers.
func (r *Retired) InFlight() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	keep := r.list[:0]
	for _, c := range r.list {
		if k := c.InFlight(); k > 0 {
			n += k
			keep = append(keep, c)
		}
	}
	clear(r.list[len(keep):])
	r.list = keep
	return n
}

// Len is how many replaced maps are still held (for tests).
func (r *Retired) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.list)
}
