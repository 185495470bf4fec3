package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// The raw framing check. net/http's parser normalises what the router
// must refuse: it drops Content-Length when Transfer-Encoding is present,
// joins folded header lines, and ignores Transfer-Encoding on HTTP/1.0, so
// a handler cannot tell such a request from a clean one. So the router's
// listener wraps each connection in a scanConn, which looks at every byte
// the server (the own loop or net/http's) reads, finds each request head
// and its body's framing with a small state machine (no allocation, no
// copy: a few comparisons per byte of a head, a subtraction per read of a
// body), and notes a verdict per head:
//
//   - Content-Length and Transfer-Encoding in one head (RFC 9112 §6.1: a
//     request a front and a back end may frame differently);
//   - a folded (obs-fold) Content-Length or Transfer-Encoding line;
//   - Transfer-Encoding on an HTTP/1.0 request.
//
// The handler looks its request up by its request line (method and
// target, hashed) and refuses a bad one with 400 and a closed connection
// (Proxy.serve). Once the scanner cannot follow the stream (an upgrade, a
// body it cannot frame, too many heads ahead of the handler) it stops,
// and every later request on the connection is refused: it fails closed.

// scanListener wraps each accepted connection in a scanConn.
type scanListener struct{ net.Listener }

func (l scanListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newScanConn(c), nil
}

// Scanner states.
const (
	scLine    uint8 = iota // in a head, at the start of a line
	scName                 // in a header name
	scValue                // in a header value
	scReqLine              // in the request line
	scBody                 // skipping a Content-Length body
	scChunkSize
	scChunkExt
	scChunkSizeLF
	scChunkData
	scChunkDataCR
	scChunkDataLF
	scTrailer  // at the start of a trailer line
	scTrailerX // in a trailer line
	scStopped  // lost track: every later request is refused
)

// maxAhead is how many heads the scanner may be ahead of the handler.
const maxAhead = 16

// headVerdict is one scanned head.
type headVerdict struct {
	key uint64 // FNV-1a of the request line up to its second space
	bad bool
}

// scanConn is a client connection whose reads are scanned. Reads happen on
// one goroutine at a time (the own loop, its client watch, or net/http's
// connection goroutine and background read, which never overlap); the
// verdicts are read by the handler's goroutine, hence the mutex, taken
// once per head and once per request.
type scanConn struct {
	net.Conn
	st scanState

	mu      sync.Mutex
	ring    [maxAhead]headVerdict
	head    int // index of the oldest verdict
	n       int // verdicts held
	stopped bool
}

// scanState is the scanner's per-head state, touched by the reading
// goroutine only.
type scanState struct {
	state     uint8
	spaces    uint8  // spaces seen in the request line
	key       uint64 // the request line's hash so far
	http10    bool
	name      [20]byte // a header name's first bytes, lower case
	nameLen   int
	cur       uint8 // framing header of the current line: 0, hdrCL, hdrTE
	prev      uint8 // ... of the line before (for folds)
	hasCL     bool
	hasTE     bool
	fold      bool
	upgrade   bool
	clVal     int64
	clBad     bool
	teChunked bool // the (one) Transfer-Encoding value so far is "chunked"
	teLen     int
	left      int64 // body bytes left (scBody, scChunkData)
	chunkLen  int   // hex digits of the chunk size
}

const (
	hdrCL uint8 = 1 + iota
	hdrTE
	hdrUpgrade
	hdrOther
)

func newScanConn(c net.Conn) *scanConn {
	sc := &scanConn{Conn: c}
	sc.st.reset()
	return sc
}

func (s *scanState) reset() {
	*s = scanState{state: scReqLine, key: fnvOffset}
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// lineKey is the verdict key of a request as the handler sees it.
func lineKey(method, target string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(method); i++ {
		h = (h ^ uint64(method[i])) * fnvPrime
	}
	h = (h ^ ' ') * fnvPrime
	for i := 0; i < len(target); i++ {
		h = (h ^ uint64(target[i])) * fnvPrime
	}
	return h
}

func (c *scanConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.st.state != scStopped {
		c.scan(p[:n])
	}
	return n, err
}

// CloseWrite lets net/http close gracefully, as on a *net.TCPConn.
func (c *scanConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// scan advances the state machine over b.
func (c *scanConn) scan(b []byte) {
	s := &c.st
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch s.state {
		case scReqLine:
			switch {
			case ch == '\n':
				s.http10 = s.nameLen == 8 && string(s.name[:8]) == "HTTP/1.0"
				s.nameLen = 0
				s.state = scLine
			case ch == ' ' && s.spaces < 2:
				if s.spaces == 0 {
					s.key = (s.key ^ ' ') * fnvPrime
				}
				s.spaces++
			case s.spaces < 2:
				s.key = (s.key ^ uint64(ch)) * fnvPrime
			case ch != '\r':
				// The protocol: only whether it is "HTTP/1.0" matters.
				if s.nameLen < len(s.name) {
					s.name[s.nameLen] = ch
				}
				s.nameLen++
			}
		case scLine:
			switch ch {
			case '\r':
				// the end of the line: wait for LF
			case '\n':
				if !c.endHead() {
					return
				}
			case ' ', '\t':
				if s.prev == hdrCL || s.prev == hdrTE {
					s.fold = true
				}
				s.cur = s.prev
				s.state = scValue
			default:
				s.state = scName
				s.nameLen = 0
				s.cur = 0
				s.nameByte(ch)
			}
		case scName:
			if ch == ':' {
				s.cur = s.header()
				switch s.cur {
				case hdrCL:
					if s.hasCL {
						s.clBad = true // net/http would check the values agree; the scanner just gives up
					}
					s.hasCL, s.clVal = true, 0
				case hdrTE:
					s.teChunked = !s.hasTE // two TE lines: net/http refuses them
					s.teLen = 0
					s.hasTE = true
				case hdrUpgrade:
					s.upgrade = true
				}
				s.state = scValue
			} else if ch == '\n' {
				s.prev, s.state = 0, scLine // not a header line: net/http refuses it
			} else {
				s.nameByte(ch)
			}
		case scValue:
			if ch == '\n' {
				s.prev, s.state = s.cur, scLine
				continue
			}
			switch s.cur {
			case hdrCL:
				switch {
				case '0' <= ch && ch <= '9':
					if s.clVal > 1<<50 {
						s.clBad = true
					}
					s.clVal = 10*s.clVal + int64(ch-'0')
				case ch == ' ' || ch == '\t' || ch == '\r':
				default:
					s.clBad = true
				}
			case hdrTE:
				if ch != ' ' && ch != '\t' && ch != '\r' {
					if s.teLen < 7 && lower(ch) == "chunked"[s.teLen] {
						s.teLen++
					} else {
						s.teChunked = false
					}
				}
			}
		case scBody:
			take := min(int64(len(b)-i), s.left)
			s.left -= take
			i += int(take) - 1
			if s.left == 0 {
				s.reset()
			}
		case scChunkSize:
			if isHex(ch) {
				s.chunkLen++
				if s.chunkLen > 15 {
					c.stop()
					return
				}
				s.left = s.left<<4 | int64(unhex(ch))
				continue
			}
			if s.chunkLen == 0 { // an empty size: net/http refuses it
				c.stop()
				return
			}
			switch ch {
			case ';', ' ', '\t':
				s.state = scChunkExt
			case '\r':
				s.state = scChunkSizeLF
			case '\n':
				c.endChunkSize()
			default:
				c.stop()
				return
			}
		case scChunkExt:
			if ch == '\n' {
				c.endChunkSize()
			}
		case scChunkSizeLF:
			if ch != '\n' {
				c.stop()
				return
			}
			c.endChunkSize()
		case scChunkData:
			take := min(int64(len(b)-i), s.left)
			s.left -= take
			i += int(take) - 1
			if s.left == 0 {
				s.state = scChunkDataCR
			}
		case scChunkDataCR:
			switch ch {
			case '\r':
				s.state = scChunkDataLF
			case '\n':
				s.state, s.chunkLen = scChunkSize, 0
			default:
				c.stop()
				return
			}
		case scChunkDataLF:
			if ch != '\n' {
				c.stop()
				return
			}
			s.state, s.chunkLen = scChunkSize, 0
		case scTrailer:
			switch ch {
			case '\r':
			case '\n':
				s.reset()
			default:
				s.state = scTrailerX
			}
		case scTrailerX:
			if ch == '\n' {
				s.state = scTrailer
			}
		}
	}
}

func (s *scanState) nameByte(ch byte) {
	if s.nameLen < len(s.name) {
		s.name[s.nameLen] = lower(ch)
	}
	s.nameLen++
}

// header classifies the header name just read.
func (s *scanState) header() uint8 {
	if s.nameLen > len(s.name) {
		return hdrOther
	}
	switch string(s.name[:s.nameLen]) {
	case "content-length":
		return hdrCL
	case "transfer-encoding":
		return hdrTE
	case "upgrade":
		return hdrUpgrade
	}
	return hdrOther
}

func (c *scanConn) endChunkSize() {
	s := &c.st
	s.chunkLen = 0
	if s.left == 0 {
		s.state = scTrailer
		return
	}
	s.state = scChunkData
}

// endHead records the verdict of the head that just ended and starts on
// its body; false means the scanner stopped.
func (c *scanConn) endHead() bool {
	s := &c.st
	bad := (s.hasCL && s.hasTE) || s.fold || (s.http10 && s.hasTE)
	if !c.push(headVerdict{key: s.key, bad: bad}) || bad || s.upgrade {
		c.stop() // after a refused head, or an upgrade, the stream is not HTTP we can follow
		return false
	}
	switch {
	case s.hasTE:
		if !s.teChunked || s.teLen != 7 {
			c.stop() // net/http refuses it (501) and closes
			return false
		}
		s.reset()
		s.state = scChunkSize
	case s.hasCL:
		if s.clBad {
			c.stop()
			return false
		}
		left := s.clVal
		s.reset()
		if left > 0 {
			s.state, s.left = scBody, left
		}
	default:
		s.reset()
	}
	return true
}

func (c *scanConn) push(v headVerdict) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == maxAhead {
		return false
	}
	c.ring[(c.head+c.n)%maxAhead] = v
	c.n++
	return true
}

func (c *scanConn) stop() {
	c.st.state = scStopped
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
}

// take removes and returns the verdict of the request with this key,
// dropping older ones (requests net/http answered without the handler,
// such as OPTIONS *). ok is false when there is none: the scanner stopped
// or never saw such a head, and the request must be refused.
func (c *scanConn) take(key uint64) (bad, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n > 0 {
		v := c.ring[c.head]
		c.head = (c.head + 1) % maxAhead
		c.n--
		if v.key == key {
			return v.bad, true
		}
	}
	return false, false
}

// takeOldest drops the oldest verdict: the own loop serves requests in
// order and calls it for each request it serves itself, whose heads it
// parsed strictly (they carry no framing header).
func (c *scanConn) takeOldest() {
	c.mu.Lock()
	if c.n > 0 {
		c.head = (c.head + 1) % maxAhead
		c.n--
	}
	c.mu.Unlock()
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// scanConnKey holds a request's scanConn in its context on net/http's
// server.
type scanConnKey struct{}

// withScanConn is net/http's ConnContext: it finds the scanConn under a
// handed-over connection.
func withScanConn(ctx context.Context, c net.Conn) context.Context {
	if rc, ok := c.(*replayConn); ok {
		c = rc.Conn
	}
	if sc, ok := c.(*scanConn); ok {
		return context.WithValue(ctx, scanConnKey{}, sc)
	}
	return ctx
}

// rawRefusal is the raw framing check of a request served by net/http's
// server: nil to serve it. A request not read through a scanConn (a Proxy
// used as a plain http.Handler) is not checked.
func rawRefusal(r *http.Request) *refusal {
	sc, _ := r.Context().Value(scanConnKey{}).(*scanConn)
	if sc == nil {
		return nil
	}
	if bad, ok := sc.take(lineKey(r.Method, r.RequestURI)); !ok || bad {
		return refuseFramingRaw
	}
	return nil
}
