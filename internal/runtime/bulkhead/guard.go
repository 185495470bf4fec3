package bulkhead

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/labstack/echo/v4"
)

// Bits of guard.held: which permits the guard still holds.
const (
	heldTenant uint32 = 1 << iota
	heldServer
)

// guard is installed as the Echo response's writer while a request holds a
// tenant or server permit. The first sign that the response head is on its
// way (WriteHeader with a final status, Write, Flush, Hijack) gives every
// held permit back; whatever is left goes back when the middleware that
// took it returns. Each bit of held has exactly one winner, so a permit is
// released once whichever path gets there first.
//
// Measured against Echo's Response.Before hook (BenchmarkHeadRelease, same
// run): the hook costs 3 allocations (40 B) and 2–4× the time per
// request (the hook slice, the bound closure and the state it releases),
// the pooled wrapper none; and the hook does not fire on a Flush before the
// first write, nor on a write to Response().Writer, so the wrapper is both
// cheaper and covers every way to start a stream.
type guard struct {
	http.ResponseWriter
	tenant admission.Permit
	server *Limiter
	held   atomic.Uint32
}

var guardPool = sync.Pool{New: func() any { return new(guard) }}

// install returns the guard on res that does not hold bit yet, wrapping
// res.Writer in a new one if there is none; installed says which, and the
// installer uninstalls it in finish.
func install(res *echo.Response, bit uint32) (g *guard, installed bool) {
	if g, ok := res.Writer.(*guard); ok && g.held.Load()&bit == 0 {
		return g, false
	}
	g = guardPool.Get().(*guard)
	g.ResponseWriter = res.Writer
	res.Writer = g
	return g, true
}

// finish runs when the middleware that took bit returns (normally, by a
// panic or after a deadline): it gives bit back if the head has not, and
// the installer restores the writer and recycles the guard. The request is
// over, so nothing writes through the guard any more.
func (g *guard) finish(res *echo.Response, bit uint32, installed bool) {
	g.drop(bit)
	if !installed {
		return
	}
	g.releaseAll()
	if res.Writer == g {
		res.Writer = g.ResponseWriter
	}
	g.ResponseWriter, g.server = nil, nil
	guardPool.Put(g)
}

// drop gives back one permit if it is still held.
func (g *guard) drop(bit uint32) {
	if g.held.Load()&bit != 0 && g.held.And(^bit)&bit != 0 {
		g.release(bit)
	}
}

// releaseAll gives back every permit still held: the head is being written.
func (g *guard) releaseAll() {
	if g.held.Load() != 0 {
		g.release(g.held.Swap(0))
	}
}

func (g *guard) release(bits uint32) {
	if bits&heldTenant != 0 {
		g.tenant.Release()
	}
	if bits&heldServer != 0 {
		g.server.Release()
	}
}

// WriteHeader releases the permits on a final status (1xx other than 101
// Switching Protocols is informational: the real head is still to come).
func (g *guard) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		g.releaseAll()
	}
	g.ResponseWriter.WriteHeader(code)
}

// Write releases the permits: net/http sends the head before the body.
func (g *guard) Write(b []byte) (int, error) {
	g.releaseAll()
	return g.ResponseWriter.Write(b)
}

// FlushError releases the permits (a flush sends the head) and flushes the
// wrapped writer; http.ResponseController prefers it to Flush.
func (g *guard) FlushError() error {
	g.releaseAll()
	return http.NewResponseController(g.ResponseWriter).Flush()
}

// Flush implements http.Flusher. A writer that cannot flush is left as is,
// as net/http's own wrappers do; use http.ResponseController to see the
// error.
func (g *guard) Flush() { _ = g.FlushError() }

// Hijack implements http.Hijacker (WebSocket upgrades): the connection
// leaves HTTP, so the permits go back.
func (g *guard) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	g.releaseAll()
	return http.NewResponseController(g.ResponseWriter).Hijack()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (g *guard) Unwrap() http.ResponseWriter { return g.ResponseWriter }
