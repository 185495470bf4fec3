package httpguard

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The connection-level guard. net/http's parser normalises what must be
// refused: it frames a request with both Content-Length and
// Transfer-Encoding by the latter, joins folded header lines, ignores
// Transfer-Encoding on HTTP/1.0, and deletes the framing headers before a
// handler runs, so a handler cannot tell such a request from a clean one.
// Its header timeout starts at accept for the first request, but on a
// keep-alive connection only once four bytes of the next request have
// arrived, so a client could hold a connection for the idle timeout plus
// the header timeout per request.
//
// So the server's listener wraps each connection in a Conn, which does not
// parse requests (net/http does): it classifies the bytes net/http reads.
// A small state machine follows the stream's heads and bodies (no
// allocation, no copy: a few comparisons per byte of a head, a subtraction
// per read of a body) and notes a verdict per head, keyed by its request
// line; Rules.Check looks a request's verdict up. Once the scanner cannot
// follow the stream (a body it cannot frame, more pipelined heads than it
// keeps), every later request on the connection is refused: it fails
// closed. While a head is read, every read deadline net/http sets is
// clamped to the head's own, fixed at the head's first byte (the first
// request's at accept), so it never restarts or extends.

// Listener wraps each accepted connection in a Conn. Serve it with an
// http.Server whose ConnState and ConnContext are this package's (Install).
type Listener struct {
	net.Listener
	// HeaderTimeout bounds each request head from its first byte (the
	// first from accept); 0: no head deadline of the guard's own.
	HeaderTimeout time.Duration
}

// Accept wraps the next connection.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &Conn{Conn: c, headerTimeout: l.HeaderTimeout}
	g.st.reset()
	if l.HeaderTimeout > 0 {
		g.headDL = time.Now().Add(l.HeaderTimeout)
	}
	return g, nil
}

// Install sets srv's ConnState and ConnContext to the guard's, keeping
// hooks already set (they run after the guard's).
func Install(srv *http.Server) {
	state, ctx := srv.ConnState, srv.ConnContext
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		connState(c, st)
		if state != nil {
			state(c, st)
		}
	}
	srv.ConnContext = func(base context.Context, c net.Conn) context.Context {
		if g, ok := c.(*Conn); ok {
			base = context.WithValue(base, connKey{}, g)
		}
		if ctx != nil {
			return ctx(base, c)
		}
		return base
	}
}

// Phases of a guarded connection (for the head deadline).
const (
	phaseHead uint32 = iota // waiting for or reading a request head
	phaseBody               // a request is being served
)

// verdict is what the scan found in one head.
type verdict uint8

const (
	headOK        verdict = iota
	headObsFold           // a folded header line
	headAmbiguous         // Content-Length with Transfer-Encoding, or Transfer-Encoding on HTTP/1.0
	headUnscanned         // no verdict: the scan lost the stream
)

// maxAhead is how many heads the scanner keeps ahead of the handlers.
const maxAhead = 16

type headVerdict struct {
	key uint64 // FNV-1a of the request line up to its second space
	v   verdict
}

// Conn is one guarded connection; see the section comment. Reads happen
// on one goroutine at a time (net/http's connection goroutine or its
// background read, which never overlap); verdicts are taken by request
// goroutines, hence the mutex, taken once per head and once per request.
type Conn struct {
	net.Conn
	headerTimeout time.Duration
	phase         atomic.Uint32

	// The reading goroutine only.
	headDL time.Time // this head's deadline; zero until its first byte
	want   time.Time // the read deadline net/http last asked for
	st     scanState

	mu      sync.Mutex
	ring    [maxAhead]headVerdict
	head, n int // the oldest verdict, verdicts held
	stopped bool
}

// Read scans what net/http reads and arms a head's deadline at its first
// byte.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if c.headerTimeout > 0 && c.phase.Load() == phaseHead && c.headDL.IsZero() {
			c.headDL = time.Now().Add(c.headerTimeout)
			_ = c.Conn.SetReadDeadline(c.clamp(c.want))
		}
		if c.st.state != scStopped {
			c.scan(p[:n])
		}
	}
	return n, err
}

// SetReadDeadline, while a head is read, keeps t no later than the head's
// deadline; net/http's own later deadlines can only shorten it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.phase.Load() == phaseHead {
		c.want = t
		t = c.clamp(t)
	}
	return c.Conn.SetReadDeadline(t)
}

// clamp returns the earlier of t (zero: none) and the head's deadline.
func (c *Conn) clamp(t time.Time) time.Time {
	if !c.headDL.IsZero() && (t.IsZero() || t.After(c.headDL)) {
		return c.headDL
	}
	return t
}

// CloseWrite half-closes the connection, as net/http does before closing
// one whose request it did not read to the end (so the client gets the
// answer before a reset); without it, net/http waits 500 ms and resets.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// enterBody ends a head's deadline: the one net/http set for the rest of
// the request is put back unclamped.
func (c *Conn) enterBody() {
	if c.phase.Load() != phaseHead {
		return
	}
	c.headDL = time.Time{}
	c.phase.Store(phaseBody)
	_ = c.Conn.SetReadDeadline(c.want)
}

// enterHead starts the wait for the next request: its head deadline is
// armed by its first byte.
func (c *Conn) enterHead() {
	c.headDL, c.want = time.Time{}, time.Time{}
	c.phase.Store(phaseHead)
}

func connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok {
		return
	}
	switch st {
	case http.StateActive:
		c.enterBody()
	case http.StateIdle:
		c.enterHead()
	case http.StateHijacked:
		// Not HTTP any more (an upgrade): nothing to scan.
		c.st.state = scStopped
	}
}

// connKey is the context key of a request's Conn.
type connKey struct{}

// headVerdictOf returns the verdict on r's head, taking it; headOK when r
// did not come through a Conn (a handler used without the listener, or a
// test's request).
func headVerdictOf(r *http.Request) verdict {
	c, ok := r.Context().Value(connKey{}).(*Conn)
	if !ok {
		return headOK
	}
	if c.phase.Load() == phaseHead {
		// net/http parsed this head from bytes it had buffered with the
		// previous request (pipelining), so it never said StateActive.
		c.enterBody()
	}
	return c.take(lineKey(r.Method, r.RequestURI))
}

func (c *Conn) push(v headVerdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == maxAhead {
		// The oldest head's request now finds no verdict: refused.
		c.head = (c.head + 1) % maxAhead
		c.n--
	}
	c.ring[(c.head+c.n)%maxAhead] = v
	c.n++
}

func (c *Conn) stop() {
	c.st.state = scStopped
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

// take removes and returns the verdict of the request with this key,
// dropping older ones (requests net/http answered without a handler, such
// as OPTIONS * or a 417). headUnscanned when there is none.
func (c *Conn) take(key uint64) verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n > 0 {
		v := c.ring[c.head]
		c.head = (c.head + 1) % maxAhead
		c.n--
		if v.key == key {
			return v.v
		}
	}
	return headUnscanned
}
