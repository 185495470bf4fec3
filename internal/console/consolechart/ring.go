// Package consolechart draws the consoles' charts on the server, as SVG, and
// keeps the samples they draw in fixed rings; Rate and JSONPoints are the
// samplers' and JSON APIs' shared steps (a counter's rate, a gap as null).
//
// A page that shows a chart needs no script and no asset beyond the page
// itself: the chart is an <svg> element written into the HTML. Every label
// is escaped here, so a caller may pass names that came from users (tenant
// ids, database names). The package knows no HTTP and no database: both the
// cells' console and the router's console draw with it.
package consolechart

import (
	"math"
	"time"
)

// Point is one sample: a value at a time. A NaN value is a gap (nothing was
// measured then, say a database did not answer); the line breaks there.
type Point struct {
	T time.Time
	V float64
}

// Ring holds the last Cap() samples of one series; a new sample overwrites
// the oldest. Its memory is fixed when it is made: Add never allocates, so a
// sampler can run for months without growing.
//
// A Ring is not safe for concurrent use: its owner guards it (the consoles'
// samplers write under a lock their readers take too).
type Ring struct {
	buf  []Point
	next int // where the next sample goes
	n    int // how many samples it holds (≤ len(buf))
}

// NewRing makes a ring of size samples (at least 1).
func NewRing(size int) *Ring {
	return &Ring{buf: make([]Point, max(size, 1))}
}

// Add records v at t, overwriting the oldest sample when the ring is full.
func (r *Ring) Add(t time.Time, v float64) {
	r.buf[r.next] = Point{T: t, V: v}
	r.next++
	if r.next == len(r.buf) {
		r.next = 0
	}
	if r.n < len(r.buf) {
		r.n++
	}
}

// Gap records that nothing was measured at t (the chart breaks its line).
func (r *Ring) Gap(t time.Time) { r.Add(t, math.NaN()) }

// Len is how many samples the ring holds; Cap how many it can hold.
func (r *Ring) Len() int { return r.n }

// Cap is the ring's fixed size.
func (r *Ring) Cap() int { return len(r.buf) }

// At returns the i-th sample held, 0 being the oldest. It panics when i is
// out of [0, Len()).
func (r *Ring) At(i int) Point {
	if i < 0 || i >= r.n {
		panic("consolechart: Ring.At out of range")
	}
	start := r.next - r.n
	if start < 0 {
		start += len(r.buf)
	}
	j := start + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return r.buf[j]
}

// Last returns the newest sample, and false when the ring is empty.
func (r *Ring) Last() (Point, bool) {
	if r.n == 0 {
		return Point{}, false
	}
	return r.At(r.n - 1), true
}

// Points appends the samples held to dst, oldest first, and returns it: a
// reader copies them out under its owner's lock and draws without it.
func (r *Ring) Points(dst []Point) []Point {
	for i := range r.n {
		dst = append(dst, r.At(i))
	}
	return dst
}

// Reset forgets every sample (the memory stays).
func (r *Ring) Reset() { r.next, r.n = 0, 0 }

// Rate is the per-second rate of a counter that went from last to cur in
// secs seconds: NaN (a gap) when no time passed (or the clock stepped
// back) or the counter went back (it restarted), where no rate can be told.
func Rate(cur, last uint64, secs float64) float64 {
	if secs <= 0 || cur < last {
		return math.NaN()
	}
	return float64(cur-last) / secs
}

// JSONPoint is a Point as the consoles' JSON APIs write it: a gap is a
// null value (JSON has no NaN).
type JSONPoint struct {
	T time.Time `json:"t"`
	V *float64  `json:"v"`
}

// JSONPoints converts ps for JSON, in their order.
func JSONPoints(ps []Point) []JSONPoint {
	out := make([]JSONPoint, len(ps))
	for i, p := range ps {
		out[i].T = p.T
		if !math.IsNaN(p.V) {
			v := p.V
			out[i].V = &v
		}
	}
	return out
}
