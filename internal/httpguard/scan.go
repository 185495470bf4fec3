package httpguard

// The scanner's state machine: it follows request heads and the bodies
// their framing implies, as net/http will read them, and notes one verdict
// per head (Conn.push). It never builds a request: it keeps a hash of the
// request line, the first bytes of a header name, and the framing found.

// Scanner states.
const (
	scReqLine uint8 = iota // in the request line (or the empty lines before it)
	scLine                 // in a head, at the start of a line
	scName                 // in a header name
	scValue                // in a header value
	scBody                 // skipping a Content-Length body
	scChunkSize
	scChunkExt
	scChunkSizeLF
	scChunkData
	scChunkDataCR
	scChunkDataLF
	scTrailer  // at the start of a trailer line
	scTrailerX // in a trailer line
	scStopped  // lost track: later requests find no verdict
)

// scanState is the scanner's state, touched by the reading goroutine only.
type scanState struct {
	state     uint8
	started   bool   // a byte of the request line was seen
	spaces    uint8  // spaces seen in the request line
	key       uint64 // the request line's hash so far
	http10    bool
	name      [20]byte // a header name's first bytes, lower case (the request line's version)
	nameLen   int
	cur       uint8 // framing header of the current line: 0, hdrCL, hdrTE
	hasCL     bool
	hasTE     bool
	fold      bool
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
	hdrOther
)

func (s *scanState) reset() { *s = scanState{state: scReqLine, key: fnvOffset} }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// lineKey is the verdict key of a request as a handler sees it.
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

// scan advances the state machine over b.
func (c *Conn) scan(b []byte) {
	s := &c.st
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch s.state {
		case scReqLine:
			switch {
			case !s.started && (ch == '\r' || ch == '\n'):
				// RFC 9112 §2.2: empty lines before a request line.
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
				s.started = true
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
				s.fold = true
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
				}
				s.state = scValue
			} else if ch == '\n' {
				s.state = scLine // not a header line: net/http refuses it
			} else {
				s.nameByte(ch)
			}
		case scValue:
			if ch == '\n' {
				s.state = scLine
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
				s.endChunkSize()
			default:
				c.stop()
				return
			}
		case scChunkExt:
			if ch == '\n' {
				s.endChunkSize()
			}
		case scChunkSizeLF:
			if ch != '\n' {
				c.stop()
				return
			}
			s.endChunkSize()
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
	}
	return hdrOther
}

func (s *scanState) endChunkSize() {
	s.chunkLen = 0
	if s.left == 0 {
		s.state = scTrailer
		return
	}
	s.state = scChunkData
}

// endHead records the verdict of the head that just ended and starts on
// its body; false means the scanner stopped.
func (c *Conn) endHead() bool {
	s := &c.st
	v := headOK
	switch {
	case s.fold:
		v = headObsFold
	case s.hasTE && (s.hasCL || s.http10):
		v = headAmbiguous
	}
	c.push(headVerdict{key: s.key, v: v})
	if v != headOK {
		c.stop() // the request is refused and the connection closed
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
			c.stop() // net/http refuses it (400) and closes
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

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
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
