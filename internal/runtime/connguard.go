package runtime

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// The cell's own framing and header deadline, below net/http.
//
// net/http frames a request with both Content-Length and Transfer-Encoding
// by the latter and keeps the connection open, folds obs-fold lines into
// the previous header, and deletes both framing headers before a handler
// runs: by then nothing can tell what the client sent. Its header timeout
// starts at accept for the first request, but on a keep-alive connection
// only once four bytes of the next request have arrived, so a client can
// hold a connection for idle_timeout plus read_header_timeout per request.
//
// guardedConn watches the head of every request as net/http reads it off
// the wire: it fixes the head's deadline at the request's first byte (the
// first request's at accept) and clamps every deadline net/http sets while
// the head is read to it, so it never restarts or extends; and it scans the
// head's lines for the framing net/http would accept and forget. The
// verdict reaches the request through its context (frameGuard); the
// request scope answers a refused head 400 and closes the connection.
//
// Concurrency: net/http reads a head on the connection's serve goroutine
// only, and switches phases (ConnState) on the same goroutine after its
// background reader has stopped, so the head state needs no lock; phase is
// atomic because the background reader of a request body checks it.

// Phases of a guarded connection.
const (
	phaseHead uint32 = iota // reading a request head
	phaseBody               // a request is being served
)

// headVerdict is what the scan of one request head found.
type headVerdict uint8

const (
	headOK       headVerdict = iota
	headUnvetted             // the head was (partly) read before its phase began: serve, then close
	headObsFold              // a folded header line
	headCLTE                 // Content-Length with Transfer-Encoding, or Transfer-Encoding on HTTP/1.0
)

// guardedListener wraps every accepted connection in a guardedConn.
type guardedListener struct {
	net.Listener
	headerTimeout time.Duration // 0: no head deadline of its own
}

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &guardedConn{Conn: c, headerTimeout: l.headerTimeout}
	if l.headerTimeout > 0 {
		// The first request's head runs from the connection's start.
		g.headDL = time.Now().Add(l.headerTimeout)
	}
	return g, nil
}

// guardedConn is one connection of the cell; see the section comment.
type guardedConn struct {
	net.Conn
	headerTimeout time.Duration
	phase         atomic.Uint32

	// Head phase only (the serve goroutine).
	headDL  time.Time // this head's deadline; zero until its first byte
	want    time.Time // the read deadline net/http last asked for
	scan    headScan
	verdict headVerdict // of the last head, taken by the request scope
}

// Read scans a head as it arrives and arms its deadline on its first byte.
func (g *guardedConn) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if n > 0 && g.phase.Load() == phaseHead {
		if g.headDL.IsZero() && g.headerTimeout > 0 {
			g.headDL = time.Now().Add(g.headerTimeout)
			_ = g.Conn.SetReadDeadline(g.clamp(g.want))
		}
		g.scan.feed(p[:n])
	}
	return n, err
}

// SetReadDeadline, while a head is read, keeps t no later than the head's
// deadline; net/http's own later deadlines can only shorten it.
func (g *guardedConn) SetReadDeadline(t time.Time) error {
	if g.phase.Load() == phaseHead {
		g.want = t
		t = g.clamp(t)
	}
	return g.Conn.SetReadDeadline(t)
}

// clamp returns the earlier of t (zero: none) and the head's deadline.
func (g *guardedConn) clamp(t time.Time) time.Time {
	if !g.headDL.IsZero() && (t.IsZero() || t.After(g.headDL)) {
		return g.headDL
	}
	return t
}

// CloseWrite half-closes the connection, as net/http does before closing
// one whose request it did not read to the end (so the client gets the
// answer before a reset); without it, net/http waits 500 ms and resets.
func (g *guardedConn) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// enterBody ends a head: its verdict is kept for the request scope, and
// the deadline net/http set for the rest of the request is put back
// unclamped. Called on StateActive, or by the request scope when net/http
// served a head it had buffered already (no StateActive then).
func (g *guardedConn) enterBody() {
	if g.phase.Load() != phaseHead {
		return
	}
	g.verdict = g.scan.verdict()
	g.scan = headScan{}
	g.headDL = time.Time{}
	g.phase.Store(phaseBody)
	_ = g.Conn.SetReadDeadline(g.want)
}

// enterHead starts the wait for the next request (StateIdle): its head
// deadline is armed by its first byte.
func (g *guardedConn) enterHead() {
	g.headDL = time.Time{}
	g.want = time.Time{}
	g.scan = headScan{}
	g.phase.Store(phaseHead)
}

// takeVerdict returns the verdict of the head of the request being served.
func (g *guardedConn) takeVerdict() headVerdict {
	if g.phase.Load() == phaseHead {
		// net/http parsed this head from bytes it had buffered with the
		// previous request (pipelining): it did not pass the scan.
		g.scan = headScan{}
		g.enterBody()
		return headUnvetted
	}
	return g.verdict
}

// trackConnState is the http.Server's ConnState: it moves a guardedConn
// between its phases.
func trackConnState(c net.Conn, st http.ConnState) {
	g, ok := c.(*guardedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateActive:
		g.enterBody()
	case http.StateIdle:
		g.enterHead()
	}
}

// guardKey is the context key of a request's guardedConn.
type guardKey struct{}

// connContext is the http.Server's ConnContext: it puts the guardedConn
// into every request's context, where the request scope finds it.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if g, ok := c.(*guardedConn); ok {
		return context.WithValue(ctx, guardKey{}, g)
	}
	return ctx
}

// headVerdictOf returns the verdict on r's head; headOK when r did not
// come through a guarded connection (a test's httptest.NewRequest).
func headVerdictOf(r *http.Request) headVerdict {
	if g, ok := r.Context().Value(guardKey{}).(*guardedConn); ok {
		return g.takeVerdict()
	}
	return headOK
}

// headScan reads one request head a chunk at a time: the request line,
// then header lines up to the empty line. It keeps only what its checks
// need: the first bytes of the current line (a header's name), the last
// bytes (the request line's version) and what it found.
type headScan struct {
	line     int // bytes of the current line so far
	lines    int // complete lines so far
	prefix   [len("transfer-encoding:")]byte
	tail     [len("HTTP/1.0")]byte
	done     bool // the empty line that ends the head was seen
	badStart bool // the first line does not begin with "<token> "
	http10   bool
	cl, te   bool
	fold     bool
}

// feed scans b; bytes after the head's end are the body's, not looked at.
// Lines are found with bytes.IndexByte, and of each only the first bytes
// (and of the request line the last) are looked at one by one.
func (s *headScan) feed(b []byte) {
	for len(b) > 0 && !s.done {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		s.take(seg)
		if i < 0 {
			return
		}
		s.endLine()
		b = b[i+1:]
	}
}

// take adds a piece of the current line. CRs do not count: a CR ends a
// line with its LF, and net/http refuses one anywhere else.
func (s *headScan) take(seg []byte) {
	if s.line < len(s.prefix) || s.lines == 0 {
		for _, c := range seg {
			if c == '\r' {
				continue
			}
			if s.line < len(s.prefix) {
				s.prefix[s.line] = lower(c)
			} else if s.lines != 0 {
				s.line += len(seg) // the rest, CRs and all: only 0 or not matters now
				return
			}
			if s.lines == 0 {
				copy(s.tail[:], s.tail[1:])
				s.tail[len(s.tail)-1] = c
			}
			s.line++
		}
		return
	}
	s.line += len(seg)
}

func (s *headScan) endLine() {
	n := min(s.line, len(s.prefix))
	p := s.prefix[:n]
	switch {
	case s.lines == 0 && s.line == 0:
		// RFC 9112 §2.2: empty lines before the request line are ignored.
		return
	case s.lines == 0:
		s.badStart = !requestLineStart(p)
		s.http10 = string(s.tail[:]) == "HTTP/1.0"
	case s.line == 0:
		s.done = true
	case p[0] == ' ' || p[0] == '\t':
		s.fold = true
	case hasPrefix(p, "content-length:"):
		s.cl = true
	case hasPrefix(p, "transfer-encoding:"):
		s.te = true
	}
	s.lines++
	s.line = 0
	s.tail = [len(s.tail)]byte{}
}

// verdict judges the head scanned so far.
func (s *headScan) verdict() headVerdict {
	switch {
	case !s.done || s.badStart:
		// Not the whole head from its first byte: the rest of it was read
		// with an earlier request, so only closing is safe.
		return headUnvetted
	case s.fold:
		return headObsFold
	case s.te && (s.cl || s.http10):
		return headCLTE
	}
	return headOK
}

// requestLineStart reports whether p (lower-cased) begins "<token> ", as a
// request line does; a chunk that begins mid-head rarely does.
func requestLineStart(p []byte) bool {
	for i, c := range p {
		if c == ' ' {
			return i > 0
		}
		if !isTokenChar(c) {
			return false
		}
	}
	return false
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hasPrefix(p []byte, s string) bool { return len(p) >= len(s) && string(p[:len(s)]) == s }
