package proxy

import (
	"errors"
	"os"
	"syscall"
)

// Sending a request head to a cell and waiting for its answer, in fewer
// system calls.
//
// A plain conn.Write of the head followed by a read of the answer costs a
// write, a read that finds nothing yet (EAGAIN: the cell cannot have
// answered a request it has just been sent), a wait in the poller, then
// the read that gets the answer. Here the head is written from inside a
// syscall.RawConn read: the runtime first re-arms the poller for reading
// (so an answer arriving from here on wakes the wait), then the callback
// writes the head with one write(2) and returns false, which parks the
// goroutine in the poller without the useless read; when the connection
// becomes readable, br's next read takes the answer. Three system calls
// per exchange instead of four (strace of BenchmarkFrontLoopback, 20,000
// requests: 7.98 to 7.03 reads per request).
//
// It is safe for a cell connection because nothing may arrive on it
// before the request: a pooled connection the cell has closed meanwhile
// (its FIN re-armed away with the poller) answers the written head with a
// reset, which is a new readiness event and wakes the wait, so the
// request fails as before and is retried on another connection. A cell
// that only half-closed (FIN, and no reset for our write) gives no new
// event: that request waits for the response header timeout (a known
// limit, see docs/cells.md). A deadline (the response header timeout, or
// abort's deadline in the past) ends the wait with the same timeout error
// a read would return.
// It is not used towards clients: a pipelining client's next request may
// already be waiting unread, and re-arming would lose its readiness.

// rawSender is the send-then-wait state of one directConn, reused from
// request to request so that nothing is allocated per exchange.
type rawSender struct {
	raw  syscall.RawConn // nil: the connection offers none, plain writes
	fn   func(uintptr) bool
	p    []byte // what the callback writes
	n    int    // how much of p it wrote
	err  error  // its write error
	done bool   // the callback ran once: the next call means readable
	// wait is set around the flush of a whole head: only that write may
	// wait for the answer (bufio.Writer also writes when its buffer
	// fills, in the middle of a large head).
	wait bool
}

func (s *rawSender) init(c any) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	s.raw = raw
	s.fn = s.step // bound once: a closure per exchange would allocate
}

// step is the RawConn read callback: its first call writes p and asks to
// wait; the next call (the connection is readable) ends the wait.
func (s *rawSender) step(fd uintptr) bool {
	if s.done {
		return true
	}
	s.done = true
	for s.n < len(s.p) {
		m, err := syscall.Write(int(fd), s.p[s.n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			s.err = err
			return true
		}
		s.n += m
	}
	return false
}

// sendWait implements io.Writer for the connection's bufio.Writer: it
// writes p to the cell and returns once the answer may be read (or the
// read deadline passed). A write the socket cannot take at once (EAGAIN:
// its send buffer is full) is finished with a plain write, without the
// wait.
func (pc *directConn) sendWait(p []byte) (int, error) {
	s := &pc.send
	if !s.wait || s.raw == nil || pc.br.Buffered() > 0 {
		return pc.conn.Write(p)
	}
	s.p, s.n, s.err, s.done = p, 0, nil, false
	err := s.raw.Read(s.fn)
	n, werr := s.n, s.err
	s.p = nil
	switch {
	case errors.Is(werr, syscall.EAGAIN):
		m, err := pc.conn.Write(p[n:])
		return n + m, err
	case werr != nil:
		return n, &os.SyscallError{Syscall: "write", Err: werr}
	case n < len(p):
		// The wait ended before the callback could write (a deadline in
		// the past: the request was aborted, or the connection closed).
		return n, err
	}
	// The head is out. A wait that ended in an error (a deadline) is the
	// answer's read error: br's read meets the same deadline and says so.
	return n, nil
}

// sendWaiter is the io.Writer under a directConn's bufio.Writer.
type sendWaiter struct{ pc *directConn }

func (w sendWaiter) Write(p []byte) (int, error) { return w.pc.sendWait(p) }
