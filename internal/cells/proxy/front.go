package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/probe"
)

// frontServer serves the router's listener with its own HTTP/1.1 loop for
// the requests the lean path takes, and hands every other connection to a
// net/http server.
//
// Why: net/http's server starts a goroutine per request to watch the
// client connection (the background read) and, when the handler is done,
// stops it and waits for it. Starting, readying and waiting for that
// goroutine wakes an idle thread of the runtime two or three times per
// request; on a host whose idle cores halt (a VM) each wake-up costs tens
// of microseconds and CPU the cells and clients need, and that was most of
// what the router added over a bare TCP relay (BenchmarkRouterOverhead,
// router-over-relay-us). Here one goroutine per connection reads a
// request, forwards it and writes the answer, like the relay; nothing else
// runs per request.
//
// What it takes: HTTP/1.1 requests with a well-formed head that fits in
// the read buffer, an origin-form target, one plain Host, no body, no
// Expect, no Upgrade, no Connection other than keep-alive, that Proxy
// routes to the lean path (or refuses itself), and not the router's own
// probe paths. Anything else, at any point of a connection's life, hands
// the connection over to net/http, replaying the bytes already read, so
// net/http parses and answers that request exactly as it always did
// (errors, 431, HTTP/1.0, bodies, upgrades...) and keeps the connection.
//
// net/http's per-connection timers are replaced by one sweep every
// frontSweep: it closes connections idle longer than the idle timeout or
// slower than the read-header timeout (per-request deadlines would arm a
// runtime timer per request, which may wake a thread as well), and it
// starts the client watch for a request still running after frontSweep,
// so a client that goes away during a slow answer or a stream still
// cancels the request (within a sweep or two instead of at once). The
// sweep runs until Shutdown or Close ends, so it keeps doing so while
// Shutdown drains.
type frontServer struct {
	p                 *Proxy
	srv               *http.Server // the connections handed over
	handoff           *handoffListener
	readHeaderTimeout time.Duration // 0: none
	idleTimeout       time.Duration // 0: none
	log               *slog.Logger
	admin             bool // the router's console is on: /admin goes to net/http
	closing           atomic.Bool
	ln                atomic.Pointer[net.Listener] // set by Serve, closed by Shutdown
	served, handed    atomic.Uint64                // requests served here, connections handed over (tests)
	sweepStop         chan struct{}                // closed by stopSweep
	sweepOnce         sync.Once

	mu    sync.Mutex
	conns map[*frontConn]struct{}
	wg    sync.WaitGroup
}

// frontSweep is the period of the timeout sweep and how long a request
// runs before its client connection is watched.
const frontSweep = 100 * time.Millisecond

// frontBufSize is the read buffer per connection; a request head larger
// than that goes to net/http (whose limit is MaxHeaderBytes).
const frontBufSize = 8 << 10

func newFrontServer(p *Proxy, srv *http.Server, addr net.Addr, log *slog.Logger) *frontServer {
	idle := srv.IdleTimeout
	if idle == 0 {
		idle = srv.ReadTimeout
	}
	hdr := srv.ReadHeaderTimeout
	if hdr == 0 {
		hdr = srv.ReadTimeout
	}
	return &frontServer{p: p, srv: srv, handoff: newHandoffListener(addr), readHeaderTimeout: hdr, idleTimeout: idle,
		log: log, conns: map[*frontConn]struct{}{}, sweepStop: make(chan struct{})}
}

// Serve accepts connections on ln until Shutdown; it returns
// http.ErrServerClosed then, or the error that stopped it.
func (s *frontServer) Serve(ln net.Listener) error {
	s.ln.Store(&ln)
	if s.closing.Load() {
		ln.Close()
		return http.ErrServerClosed
	}
	go func() { _ = s.srv.Serve(s.handoff) }() // ErrServerClosed once Shutdown or Close stops it
	go s.sweepLoop()                           // not stopped here: Shutdown still needs it while it drains
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors and the like: wait, as net/http.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("router accept failed; retrying", "error", err.Error(), "delay", backoff.String())
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		fc := newFrontConn(s, c)
		if !s.track(fc) {
			c.Close()
			return http.ErrServerClosed
		}
		go fc.serve()
	}
}

func (s *frontServer) track(fc *frontConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[fc] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *frontServer) untrack(fc *frontConn) {
	s.mu.Lock()
	delete(s.conns, fc)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops accepting, closes idle connections, lets requests in
// flight finish, and shuts down the net/http server of the handed-over
// connections, all within ctx. When ctx ends first it closes the
// remaining connections, cancelling their requests, and returns ctx's
// error.
func (s *frontServer) Shutdown(ctx context.Context) error {
	defer s.stopSweep()
	s.stopAccepting()
	s.closeConns(true)
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Shutdown(ctx) }()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.closeConns(false)
		<-done
	}
	if herr := <-errc; herr != nil {
		return herr // ctx's error as well, when its connections outlasted ctx: once is enough
	}
	return err
}

// Close closes every connection at once, cancelling the requests in
// flight.
func (s *frontServer) Close() error {
	s.stopAccepting()
	s.closeConns(false)
	s.stopSweep()
	return s.srv.Close()
}

// stopSweep ends the sweep; Shutdown and Close both call it.
func (s *frontServer) stopSweep() { s.sweepOnce.Do(func() { close(s.sweepStop) }) }

func (s *frontServer) stopAccepting() {
	s.closing.Store(true)
	if ln := s.ln.Load(); ln != nil {
		_ = (*ln).Close()
	}
}

// closeConns closes the idle connections, or all of them. Closing a
// connection with a request in flight also cancels the request, as
// net/http's background read would see the close and cancel: the request
// may not be watched yet, and with no client left it must not keep its
// cell, and Shutdown, waiting.
func (s *frontServer) closeConns(idleOnly bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		switch {
		case !idleOnly:
			fc.conn.Close()
			fc.cancel()
		case fc.state.CompareAndSwap(connIdle, connClosed) || fc.state.CompareAndSwap(connNew, connClosed):
			fc.conn.Close()
		}
	}
}

func (s *frontServer) sweepLoop() {
	t := time.NewTicker(frontSweep)
	defer t.Stop()
	for {
		select {
		case <-s.sweepStop:
			return
		case <-t.C:
		}
		s.sweep(time.Now().UnixNano())
	}
}

// sweep applies the timeouts and starts client watches.
func (s *frontServer) sweep(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		since := now - fc.since.Load()
		switch fc.state.Load() {
		case connNew: // as net/http, the read-header timeout counts from the accept
			if s.readHeaderTimeout > 0 && since > int64(s.readHeaderTimeout) && fc.state.CompareAndSwap(connNew, connClosed) {
				fc.conn.Close()
			}
		case connIdle:
			if s.idleTimeout > 0 && since > int64(s.idleTimeout) && fc.state.CompareAndSwap(connIdle, connClosed) {
				fc.conn.Close()
			}
		case connHead:
			if s.readHeaderTimeout > 0 && since > int64(s.readHeaderTimeout) {
				fc.conn.Close() // the head read fails and the loop ends
			}
		case connActive:
			if since > int64(frontSweep) {
				fc.startWatch()
			}
		}
	}
}

// Connection states, in frontConn.state.
const (
	connNew    int32 = iota // accepted, waiting for the first request's first byte
	connIdle                // waiting for a later request's first byte
	connHead                // reading a request head
	connActive              // serving a request
	connClosed              // closed by the sweep or Shutdown while idle
)

// frontConn is one client connection on the own loop.
type frontConn struct {
	s      *frontServer
	conn   net.Conn
	scan   *scanConn // conn, when the listener scans heads (rawhead.go)
	remote string
	br     *bufio.Reader // reads from the frontConn (see Read)
	w      leanWriter
	hr     *bufio.Reader // parses a head already in br's buffer (net/http's parser)
	head   bytes.Reader
	rp     requestParser // parses plain heads (leanhead.go)
	ctx    *connContext  // the context of every request on the connection

	headLen int    // bytes of the current request's head in br
	beginFn func() // fc.begin, bound once

	state atomic.Int32
	since atomic.Int64 // UnixNano of the last state change

	// The client watch of a long request (see startWatch).
	watchMu    sync.Mutex
	watchState atomic.Int32 // watchOff, watchArmed or watchOn
	watchDone  chan struct{}
	stopWatch  atomic.Bool        // the request ended: the watch's read error means nothing
	cancel     context.CancelFunc // ctx.cancel, bound once
	gone       atomic.Bool        // the watch saw the client close or fail
	extra      [1]byte            // a byte the watch read (a pipelined request)
	hasExtra   bool
}

// Client watch states, in frontConn.watchState. Only the request's begin
// arms a watch and only its end disarms it, so the sweep, which looks at
// connections from its own goroutine, cannot start a watch for a request
// that has not begun, has ended, or has the next request buffered behind
// it (the client is there, and the watch must not read past it).
const (
	watchOff   int32 = iota // no watch may start
	watchArmed              // the sweep may start one
	watchOn                 // one runs
)

func newFrontConn(s *frontServer, c net.Conn) *frontConn {
	fc := &frontConn{s: s, conn: c, remote: c.RemoteAddr().String()}
	fc.scan, _ = c.(*scanConn)
	fc.br = bufio.NewReaderSize(fc, frontBufSize)
	fc.hr = bufio.NewReaderSize(&fc.head, 16) // its own buffer is unused: ReadRequest reads lines
	fc.w.bw = bufio.NewWriterSize(c, 4<<10)
	fc.w.header = http.Header{}
	fc.w.closing = &s.closing
	fc.beginFn = fc.begin
	fc.ctx = newConnContext()
	fc.cancel = fc.ctx.cancel
	fc.rp.blank = *new(http.Request).WithContext(fc.ctx)
	fc.setState(connNew)
	return fc
}

func (fc *frontConn) setState(st int32) {
	fc.since.Store(time.Now().UnixNano())
	fc.state.Store(st)
}

// Read gives br a byte the watch read first, then reads the connection.
func (fc *frontConn) Read(p []byte) (int, error) {
	if fc.hasExtra && len(p) > 0 {
		fc.hasExtra = false
		p[0] = fc.extra[0]
		return 1, nil
	}
	return fc.conn.Read(p)
}

func (fc *frontConn) serve() {
	handedOver := false
	defer func() {
		if !handedOver {
			fc.conn.Close()
		}
		fc.s.untrack(fc)
	}()
	for {
		req, n, plain, err := fc.readRequest()
		if err != nil {
			return // closed, timed out, or garbage: net/http also just closes on read errors
		}
		if req == nil || !fc.s.lean(req, plain) {
			handedOver = fc.handOver()
			return
		}
		keep, ok := fc.serveOne(req, n)
		if !ok {
			handedOver = fc.handOver()
			return
		}
		if !keep || fc.s.closing.Load() || fc.gone.Load() {
			return
		}
		fc.setState(connIdle)
		if fc.s.closing.Load() && fc.state.CompareAndSwap(connIdle, connClosed) {
			return // Shutdown may have missed this one while it was active
		}
	}
}

// readRequest waits for a request and parses its head without consuming
// it. It returns a nil request for a head the own loop leaves to net/http
// (too large, malformed), n, the head's length, and plain, whether the
// lean parser took the head (so it is known to pass plainRequest).
func (fc *frontConn) readRequest() (req *http.Request, n int, plain bool, err error) {
	if _, err := fc.br.Peek(1); err != nil {
		return nil, 0, false, err
	}
	// The head's time runs from the accept for a connection's first
	// request (as net/http's), from its first byte for a later one, and is
	// never restarted: not here, and not by a hand-over (replayConn).
	if fc.state.CompareAndSwap(connIdle, connHead) {
		fc.since.Store(time.Now().UnixNano())
	} else if !fc.state.CompareAndSwap(connNew, connHead) {
		return nil, 0, false, net.ErrClosed // Shutdown or the sweep closed it
	}
	buf, err := peekHead(fc.br)
	if err != nil || buf == nil {
		return nil, 0, false, err // nil, nil: larger than the buffer, net/http's case
	}
	end := len(buf)
	if req, ok := fc.rp.parse(buf); ok {
		return req, end, true, nil
	}
	fc.head.Reset(buf)
	fc.hr.Reset(&fc.head)
	req, err = http.ReadRequest(fc.hr)
	if err != nil {
		return nil, 0, false, nil // net/http answers it (400 and the like)
	}
	return req.WithContext(fc.ctx), end, false, nil
}

// peekHead waits until br holds a whole head (up to and including the
// empty line that ends it) and returns it without consuming it: valid
// until br's next read. It returns nil and no error for a head larger than
// br's buffer.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for {
		buf, _ := br.Peek(br.Buffered())
		if end := headEnd(buf); end >= 0 {
			return buf[:end], nil
		}
		if len(buf) == br.Size() {
			return nil, nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// headEnd returns the length of the request head at the start of buf (up
// to and including the empty line that ends it), or -1 if buf does not
// hold all of it. Lines may end in LF alone, as net/http accepts.
func headEnd(buf []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(buf) && buf[i] == '\n':
			return i + 1
		case i+1 < len(buf) && buf[i] == '\r' && buf[i+1] == '\n':
			return i + 2
		}
	}
}

// handOver passes the connection, with what was read and not yet
// consumed, to the net/http server.
func (fc *frontConn) handOver() bool {
	fc.s.mu.Lock()
	delete(fc.s.conns, fc) // net/http tracks it now; untrack still runs wg.Done
	fc.s.mu.Unlock()
	fc.s.handed.Add(1)
	rc := &replayConn{Conn: fc.conn, fc: fc}
	if d := fc.s.readHeaderTimeout; d > 0 {
		rc.headDeadline = time.Unix(0, fc.since.Load()).Add(d)
	}
	return fc.s.handoff.push(rc)
}

// serveOne serves req on the lean path. ok false means Proxy left it
// untouched for the ReverseProxy path: the caller hands the connection
// over with the request still unread. keep reports whether the connection
// may carry another request.
func (fc *frontConn) serveOne(req *http.Request, headLen int) (keep, ok bool) {
	defer fc.ctx.end() // after endWatch: the watch may still cancel until then
	req.RemoteAddr = fc.remote
	w := &fc.w
	w.reset(req.Method == http.MethodHead)
	fc.stopWatch.Store(false)
	fc.headLen = headLen
	defer fc.endWatch()
	panicked := true
	defer func() {
		if panicked {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				fc.s.log.Error("panic serving a routed request", "remote", fc.remote, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			keep, ok = false, true
		}
	}()
	if !fc.s.p.serve(w, req, fc.beginFn) {
		panicked = false
		return false, false
	}
	panicked = false
	keep, err := w.finish()
	return keep && err == nil, true
}

// begin consumes the request's head once Proxy takes the request, and
// makes the request visible to the sweep: a client watch may start,
// unless bytes of a next request are buffered already.
func (fc *frontConn) begin() {
	_, _ = fc.br.Discard(fc.headLen)
	if fc.scan != nil {
		fc.scan.takeOldest() // a lean head: no framing header, nothing to check
	}
	fc.s.served.Add(1) // here, not after serving: the client may read the answer before serve returns
	fc.setState(connActive)
	if fc.br.Buffered() == 0 {
		fc.watchState.Store(watchArmed)
	}
}

// startWatch starts the client watch of the running request if its begin
// armed one and its end has not disarmed it. Called by the sweep.
func (fc *frontConn) startWatch() {
	fc.watchMu.Lock()
	defer fc.watchMu.Unlock()
	if !fc.watchState.CompareAndSwap(watchArmed, watchOn) {
		return
	}
	done := make(chan struct{})
	fc.watchDone = done
	go fc.watch(done)
}

// watch reads the client connection while a long request runs, as
// net/http's background read: a read error means the client went away
// and cancels the request; a byte is the next pipelined request, kept for
// the loop.
func (fc *frontConn) watch(done chan struct{}) {
	defer close(done)
	n, err := fc.conn.Read(fc.extra[:])
	if n == 1 {
		fc.hasExtra = true
		return
	}
	if err != nil && !fc.stopWatch.Load() {
		fc.gone.Store(true)
		fc.cancel()
	}
}

// endWatch stops the client watch if the sweep started one, and waits for
// it, so the loop owns the connection's reads again.
func (fc *frontConn) endWatch() {
	if fc.watchState.Swap(watchOff) != watchOn {
		return // no watch ran, and none will for this request
	}
	fc.watchMu.Lock()
	done := fc.watchDone
	fc.watchMu.Unlock()
	fc.stopWatch.Store(true)
	_ = fc.conn.SetReadDeadline(aLongTimeAgo)
	<-done
	_ = fc.conn.SetReadDeadline(time.Time{})
}

// lean reports whether the own loop may take req: see frontServer. plain
// says the lean parser took its head, which already rules out what
// plainRequest checks.
func (s *frontServer) lean(r *http.Request, plain bool) bool {
	if !plain && !plainRequest(r) {
		return false
	}
	if probe.Is(r.URL.Path) {
		return false
	}
	if s.admin && isAdmin(r.URL.Path) {
		return false // the router's console: net/http serves it (run.go)
	}
	if !plainHost(r.Host) { // the parsers moved the one Host header there
		return false
	}
	_, expect := r.Header["Expect"]
	_, upgrade := r.Header["Upgrade"]
	return !expect && !upgrade
}

// plainRequest reports whether a head net/http parsed is one the lean
// parser would also have taken as far as framing goes: HTTP/1.1, an
// origin-form target, no body, no Connection but keep-alive, header names
// that are tokens and values without control characters.
func plainRequest(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || len(r.RequestURI) == 0 || r.RequestURI[0] != '/' ||
		r.Close || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false
	}
	for k, vv := range r.Header {
		switch k {
		case "Content-Length", "Transfer-Encoding":
			return false
		case "Connection":
			if !onlyKeepAlive(vv) {
				return false
			}
		}
		if !plainField(k, vv) {
			return false
		}
	}
	return true
}

// plainHost reports whether h is a host[:port] of plain characters; any
// other Host header, valid or not, is left to net/http to judge.
func plainHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}

// plainField reports whether a header's name is a token and its values
// hold no control characters but tab, as net/http requires.
func plainField(k string, vv []string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	for _, v := range vv {
		for i := 0; i < len(v); i++ {
			if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
				return false
			}
		}
	}
	return true
}

// onlyKeepAlive reports whether Connection values name keep-alive only.
func onlyKeepAlive(vv []string) bool {
	for _, v := range vv {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.Trim(tok, " \t"); tok != "" && !strings.EqualFold(tok, "keep-alive") {
				return false
			}
		}
	}
	return true
}

// replayConn is a handed-over connection: reads return the bytes the own
// loop had buffered first.
type replayConn struct {
	net.Conn
	fc *frontConn
	// headDeadline is when the head being read at the hand-over must be
	// in: net/http's first read deadline (its header timeout, which would
	// start afresh) is kept to it, so a slow head that outgrew the own
	// loop's buffer gets no second timeout.
	headDeadline time.Time
	setOnce      bool
}

// SetReadDeadline implements net.Conn, keeping net/http's first deadline
// (the head's) to headDeadline.
func (c *replayConn) SetReadDeadline(t time.Time) error {
	if !c.setOnce {
		c.setOnce = true
		if !c.headDeadline.IsZero() && (t.IsZero() || t.After(c.headDeadline)) {
			t = c.headDeadline
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.fc.br.Buffered() > 0 {
		return c.fc.br.Read(p)
	}
	return c.fc.Read(p)
}

// CloseWrite lets net/http close gracefully, as on a *net.TCPConn.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handoffListener is the net/http server's listener: Accept returns the
// connections the own loop hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
