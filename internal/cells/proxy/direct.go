package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// directTransport is a cell's http.RoundTripper. Requests without a body
// that can be replayed and ask for no upgrade (GET, HEAD, OPTIONS: most of
// a router's traffic) go out on its own keep-alive connections, from the
// goroutine serving the request: it writes the request, reads the answer,
// and gives the connection back when the body is read. http.Transport runs
// a reader and a writer goroutine per connection and passes every request
// and answer between three goroutines; where the router shares its cores
// with the cells and other processes, each hand-off is a thread wake-up,
// and those were most of the router's added latency
// (BenchmarkRouterOverhead). Everything else (request bodies, which stream
// while the cell may already answer; upgrades; https) goes to fallback, an
// http.Transport, as do the health checks.
//
// The wire format is http.Transport's: the request is written with
// (*http.Request).Write, the same serializer, and read with
// http.ReadResponse. Like http.Transport it retries a replayable request on
// another connection when a pooled one turns out to be closed by the cell
// before any byte of an answer, and it gives 1xx answers to the request's
// httptrace hook (ReverseProxy forwards them).
type directTransport struct {
	host          string // the URL host requests must name, as in the cell URL
	addr          string // host:port to dial
	dialer        net.Dialer
	headerTimeout time.Duration // 0: none
	maxIdle       int
	maxHead       int // bytes an answer's head may take: maxHeadBytes
	fallback      http.RoundTripper

	mu     sync.Mutex
	idle   []*directConn // most recently used last: reused first
	closed bool          // no more pooling: the cell left the map
}

// idleConnTimeout is how long an unused pooled connection is kept, for the
// direct pool and the fallback http.Transport alike; below the cells'
// default server idle_timeout (120s), so the router closes first.
const idleConnTimeout = 90 * time.Second

// max1xxResponses bounds the informational answers read before the final
// one, as http.Transport does.
const max1xxResponses = 5

func newDirectTransport(host, addr string, dialer net.Dialer, headerTimeout time.Duration, maxIdle int, fallback http.RoundTripper) *directTransport {
	return &directTransport{host: host, addr: addr, dialer: dialer, headerTimeout: headerTimeout, maxIdle: maxIdle, maxHead: maxHeadBytes, fallback: fallback}
}

// RoundTrip implements http.RoundTripper, for ReverseProxy.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.fallback.RoundTrip(req)
	}
	return t.send(req, writeOutgoing, nil, false)
}

// headWriter writes the head of the request for req to a cell connection;
// direct requests have no body.
type headWriter func(bw *bufio.Writer, req *http.Request) error

// infoHandler receives each 1xx answer that comes before the final one.
type infoHandler func(code int, h http.Header) error

// writeOutgoing writes an outgoing client request as http.Transport does.
func writeOutgoing(bw *bufio.Writer, req *http.Request) error { return req.Write(bw) }

// send writes a request head with write and returns the final answer;
// info nil gives 1xx answers to req's httptrace hook. req's context bounds
// the exchange, and its method tells whether the answer has a body.
// headerFirst says the caller is done with the answer's Header before it
// reads the body, so a plain head may be parsed into the connection's
// reused header map (leanhead.go).
func (t *directTransport) send(req *http.Request, write headWriter, info infoHandler, headerFirst bool) (*http.Response, error) {
	ctx := req.Context()
	for {
		pc, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := pc.roundTrip(req, write, info, headerFirst)
		if err == nil {
			return resp, nil
		}
		pc.close()
		// A pooled connection that the cell had closed (idle timeout,
		// restart) fails before any byte of an answer: the request is
		// replayable, so try the next connection, in the end a new one.
		if !pc.reused || !pc.nothingRead || !closedByPeer(err) || ctx.Err() != nil {
			return nil, err
		}
	}
}

// closedByPeer reports whether err says the other side closed the
// connection (not a timeout, not a malformed answer).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// takes reports whether req goes out on a direct connection.
func (t *directTransport) takes(req *http.Request) bool {
	if (req.Body != nil && req.Body != http.NoBody) || req.URL.Scheme != "http" || req.URL.Host != t.host ||
		len(req.Header["Upgrade"]) > 0 || req.Close {
		return false
	}
	return replayable(req)
}

// get returns a pooled connection, the most recently used first, or dials.
func (t *directTransport) get(ctx context.Context) (*directConn, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		pc.reused = true
		return pc, nil
	}
	t.mu.Unlock()
	c, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	pc := &directConn{t: t, conn: c, headLeft: noHeadLimit}
	pc.abortFn = pc.abort // once: a method value passed per request would allocate
	pc.br = bufio.NewReaderSize(pc, 4<<10)
	pc.send.init(c)
	pc.bw = bufio.NewWriterSize(sendWaiter{pc}, 4<<10)
	return pc, nil
}

// put pools pc, or closes it when the pool is full or closed.
func (t *directTransport) put(pc *directConn) {
	pc.idleAt = time.Now()
	t.mu.Lock()
	if !t.closed && len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	pc.close()
}

// closeIdle closes pooled connections unused for at least olderThan (all of
// them when it is 0) and the fallback's idle connections.
func (t *directTransport) closeIdle(olderThan time.Duration) {
	var drop []*directConn
	t.mu.Lock()
	keep := t.idle[:0]
	for _, pc := range t.idle {
		if olderThan > 0 && time.Since(pc.idleAt) < olderThan {
			keep = append(keep, pc)
		} else {
			drop = append(drop, pc)
		}
	}
	clear(t.idle[len(keep):])
	t.idle = keep
	t.mu.Unlock()
	for _, pc := range drop {
		pc.close()
	}
	if olderThan == 0 {
		if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
	}
}

// close stops pooling for good and closes the idle connections; requests
// in flight close theirs when they end.
func (t *directTransport) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.closeIdle(0)
}

// directConn is one connection to a cell, used by one request at a time.
// It is the io.Reader under br, so it sees the cell close its side.
type directConn struct {
	t       *directTransport
	conn    net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	abortFn func() // pc.abort
	idleAt  time.Time
	sawEOF  bool // the cell closed its side: never reuse

	// Per request, owned by the goroutine using the connection (aborted
	// is also set by abort).
	reused      bool // came from the pool
	nothingRead bool // no byte of an answer arrived yet
	headLeft    int  // bytes the head may still take; noHeadLimit for the body
	aborted     atomic.Bool
	rp          responseParser // plain answer heads (leanhead.go)
	send        rawSender      // the head goes out with the wait for the answer (sendread.go)
}

// maxHeadBytes bounds what is read for an answer's head, 1xx answers
// included: http.Transport's default MaxResponseHeaderBytes.
const maxHeadBytes = 10 << 20

const noHeadLimit = -1

var errHeadTooLarge = errors.New("cells: the cell's answer head is too large")

// Read reads from the connection for br, noting progress and EOF, and
// bounding the head.
func (pc *directConn) Read(p []byte) (int, error) {
	if pc.headLeft != noHeadLimit {
		if pc.headLeft <= 0 {
			return 0, errHeadTooLarge
		}
		p = p[:min(len(p), pc.headLeft)]
	}
	n, err := pc.conn.Read(p)
	if pc.headLeft != noHeadLimit {
		pc.headLeft -= n
	}
	if n > 0 {
		pc.nothingRead = false
	}
	if err == io.EOF {
		pc.sawEOF = true
	}
	return n, err
}

// abort unblocks a read or write of the request whose context ended (the
// client went away). context.AfterFunc runs it in a goroutine of its own;
// on the own loop, connContext.cancel runs it on the goroutine that
// cancels (the client watch, or Shutdown and Close closing connections).
func (pc *directConn) abort() {
	pc.aborted.Store(true)
	_ = pc.conn.SetDeadline(aLongTimeAgo)
}

var aLongTimeAgo = time.Unix(1, 0)

// setReadDeadline sets the read deadline unless the request was aborted.
func (pc *directConn) setReadDeadline(t time.Time) {
	_ = pc.conn.SetReadDeadline(t)
	if pc.aborted.Load() {
		_ = pc.conn.SetDeadline(aLongTimeAgo)
	}
}

func (pc *directConn) close() { _ = pc.conn.Close() }

// roundTrip writes req and reads the head of the final answer. On success
// the body holds the connection until it is read or closed.
func (pc *directConn) roundTrip(req *http.Request, write headWriter, info infoHandler, headerFirst bool) (*http.Response, error) {
	pc.nothingRead = true
	pc.aborted.Store(false)
	var stop func() bool
	if cc, ok := req.Context().(*connContext); ok {
		stop = cc.afterFunc(pc.abortFn) // the own loop's: no allocation
	} else {
		stop = context.AfterFunc(req.Context(), pc.abortFn)
	}
	resp, err := pc.exchange(req, write, info, headerFirst)
	if err != nil {
		stop()
		return nil, err
	}
	resp.Body = &directBody{pc: pc, ctx: req.Context(), body: resp.Body, stop: stop, keep: !resp.Close}
	return resp, nil
}

func (pc *directConn) exchange(req *http.Request, write headWriter, info infoHandler, headerFirst bool) (*http.Response, error) {
	if err := write(pc.bw, req); err != nil {
		return nil, err
	}
	// Each deadline change re-checks aborted: abort sets the flag before
	// its own deadline, so whichever runs last, an aborted request keeps a
	// deadline in the past. The header timeout is set before the flush:
	// the flush also waits for the answer (sendread.go).
	if d := pc.t.headerTimeout; d > 0 {
		pc.setReadDeadline(time.Now().Add(d))
	}
	pc.send.wait = true
	err := pc.bw.Flush()
	pc.send.wait = false
	if err != nil {
		return nil, err
	}
	pc.headLeft = pc.t.maxHead
	resp, err := pc.readHead(req, info, headerFirst)
	pc.headLeft = noHeadLimit
	if pc.t.headerTimeout > 0 {
		pc.setReadDeadline(time.Time{})
	}
	return resp, err
}

var (
	errUnexpected101 = errors.New("cells: cell switched protocols on a request that asked for no upgrade")
	errTooMany1xx    = errors.New("cells: too many 1xx answers from the cell")
	errBadStatus     = errors.New("cells: cell answered a status code outside 100-599")
)

// readHead reads answers until the final one, giving 1xx answers to info,
// or to the request's httptrace hook when info is nil. With headerFirst a
// plain final answer to a GET (the only answers pc.rp takes; checked here
// so a HEAD or OPTIONS answer's head is not scanned for nothing) is
// parsed by the connection's own parser.
func (pc *directConn) readHead(req *http.Request, info infoHandler, headerFirst bool) (*http.Response, error) {
	if headerFirst && req.Method == http.MethodGet {
		if resp, ok := pc.readPlainHead(req); ok {
			return resp, nil
		}
	}
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		switch {
		case code < 100 || code > 599: // "099" parses, and the server would panic writing it; 6xx-9xx are no HTTP status
			return nil, errBadStatus
		case code == http.StatusSwitchingProtocols:
			return nil, errUnexpected101
		case code >= 200:
			return resp, nil
		case n == max1xxResponses:
			return nil, errTooMany1xx
		}
		if info == nil {
			if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
				info = func(code int, h http.Header) error { return trace.Got1xxResponse(code, textproto.MIMEHeader(h)) }
			}
		}
		if info != nil {
			if err := info(code, resp.Header); err != nil {
				return nil, err
			}
		}
	}
}

// readPlainHead parses the answer's head with pc.rp if it is plain and
// fits in the read buffer, consuming it. Otherwise (or on a read error) it
// consumes nothing and returns false: http.ReadResponse then reads the
// same bytes, and the same error.
func (pc *directConn) readPlainHead(req *http.Request) (*http.Response, bool) {
	head, err := peekHead(pc.br)
	if err != nil || head == nil {
		return nil, false
	}
	resp, ok := pc.rp.parse(head, req, pc.br)
	if ok {
		_, _ = pc.br.Discard(len(head))
	}
	return resp, ok
}

// directBody is an answer's body on a direct connection: reading it to the
// end gives the connection back to the pool, closing it early closes the
// connection (bytes of this answer are still on it). It is read and closed
// by one goroutine, as ReverseProxy does.
type directBody struct {
	pc   *directConn
	ctx  context.Context // the request's
	body io.ReadCloser
	stop func() bool // stops the abort hook; false if it already ran
	keep bool        // the answer allows keep-alive
	done bool
}

var errBodyDone = errors.New("cells: read on a finished answer body")

func (b *directBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errBodyDone
	}
	pc := b.pc
	n, err := b.body.Read(p)
	if err != nil {
		if err != io.EOF && pc.aborted.Load() && b.ctx.Err() != nil {
			// The client went away: say so, as http.Transport does,
			// rather than with the deadline that unblocked the read.
			err = b.ctx.Err()
		}
		b.finish(err == io.EOF)
	}
	return n, err
}

// Close implements io.Closer.
func (b *directBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *directBody) finish(atEOF bool) {
	b.done = true
	pc := b.pc
	b.pc = nil
	// stop must run in any case; the connection is reusable only if the
	// abort hook never ran, the whole answer was read and nothing follows.
	if b.stop() && atEOF && b.keep && !pc.sawEOF && pc.br.Buffered() == 0 {
		pc.t.put(pc)
		return
	}
	pc.close()
}
