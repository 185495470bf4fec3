package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/httpguard"
)

// backend is one cell as the proxy sees it: its reverse proxy, its health
// and its counters. The request path touches only atomics.
type backend struct {
	p         *Proxy
	name      string
	url       string
	target    *url.URL
	nameValue []string        // the cell header's value, shared read-only
	transport *http.Transport // the cell's pool: requests and health checks
	proxy     *httputil.ReverseProxy
	health    *http.Client
	log       *slog.Logger

	// The refusals that name the cell, encoded once.
	probDown, probBusy, probTimeout, probFailed *httpguard.Problem

	up       atomic.Bool
	inflight atomic.Int64
	// passiveFails counts consecutive transport errors; any response
	// resets it.
	passiveFails atomic.Int32

	codes                                [5]atomic.Uint64 // 1xx..5xx
	clientGone                           atomic.Uint64    // 499: the client went away before the answer
	rejectDown, rejectBusy, rejectFrozen atomic.Uint64
	rejectTenant                         atomic.Uint64 // the tenant's router cap
	errDial, errTimeout, errOther        atomic.Uint64
	clientFaults                         atomic.Uint64 // client errors on forwarded requests: never the cell's
	ejectActive, ejectPassive            atomic.Uint64

	mu          sync.Mutex // guards activeFails, the up/down transition and the fields below
	activeFails int
	// What the console shows (Proxy.Cells); written on the error and
	// health paths only, never by a request that succeeds.
	downSince, lastErrAt time.Time
	lastErr              string
	cancel               context.CancelFunc
	done                 chan struct{}
}

func newBackend(p *Proxy, c cells.CellSpec, target *url.URL) *backend {
	cfg := p.cfg
	b := &backend{
		p:         p,
		name:      c.Name,
		url:       c.URL,
		target:    target,
		nameValue: []string{c.Name}[:1:1],
		log:       cfg.Logger.With("cell", c.Name),
	}
	b.up.Store(true) // optimistic until the first check says otherwise
	b.probDown = httpguard.NewRetryProblem(http.StatusServiceUnavailable, p.retryAfter, "cell_unavailable", "cell "+c.Name+" is unavailable")
	b.probBusy = httpguard.NewRetryProblem(http.StatusServiceUnavailable, 1, "cell_busy", "cell "+c.Name+" is at its concurrency limit")
	b.probTimeout = httpguard.NewProblem(http.StatusGatewayTimeout, "cell_timeout", "cell "+c.Name+" did not answer in time")
	b.probFailed = httpguard.NewProblem(http.StatusBadGateway, "cell_error", "cell "+c.Name+" failed to answer")
	dialer := net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	// One Transport per cell: its idle pool is the cell's alone, and a
	// cell marked down drops its pooled connections without touching the
	// others'.
	b.transport = &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerCell,
		IdleConnTimeout:       idleConnTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		ExpectContinueTimeout: time.Second,
		// Bodies pass through as the cell sent them; HTTP/1.1 keeps
		// upgrades (WebSocket) working end to end.
		DisableCompression: true,
	}
	b.proxy = &httputil.ReverseProxy{
		Rewrite:   b.rewrite,
		Transport: b.transport,
		// 0, not -1: ReverseProxy flushes SSE and bodies of unknown length
		// at once by itself (-1 for those), and Proxy.send's flushWriter
		// flushes every other write. -1 for all would also start a timer
		// per response whose goroutine writes the head on its own: a
		// second write and a thread wake-up per request for nothing.
		FlushInterval:  0,
		ModifyResponse: b.onResponse,
		ErrorHandler:   b.onError,
		ErrorLog:       slog.NewLogLogger(b.log.Handler(), slog.LevelWarn),
		BufferPool:     copyBuffers,
	}
	b.health = &http.Client{Transport: b.transport, Timeout: cfg.HealthTimeout}
	return b
}

// copyBuffers recycles ReverseProxy's body copy buffers, which it would
// otherwise allocate (32 KiB) for every response. A buffered channel, not
// a sync.Pool: a []byte put in a sync.Pool is boxed, one allocation per
// response; a channel copies the slice header. It keeps at most 128
// buffers (4 MiB); beyond that many copies at once, buffers are allocated
// and dropped.
var copyBuffers = make(bufferPool, 128)

type bufferPool chan []byte

func (p bufferPool) Get() []byte {
	select {
	case b := <-p:
		return b
	default:
		return make([]byte, 32<<10)
	}
}

func (p bufferPool) Put(b []byte) {
	select {
	case p <- b:
	default:
	}
}

// idleConnTimeout is how long an unused pooled connection to a cell is
// kept.
const idleConnTimeout = 90 * time.Second

// errBadStatus is a cell's answer with a status outside 100-599.
var errBadStatus = errors.New("cells: cell answered a status code outside 100-599")

func (b *backend) key() string { return b.name + "\x00" + b.url }

// rewrite points the outgoing request at the cell. The Host header is kept:
// with tenancy.source = "subdomain" the cell reads the tenant from it.
// X-Forwarded-For keeps an incoming chain and appends the client.
//
// It sets the X-Forwarded headers as ProxyRequest.SetXForwarded does
// (ReverseProxy has removed the client's before calling it), with one
// allocation for both values and a shared "http"/"https".
func (b *backend) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(b.target)
	pr.Out.Host = pr.In.Host
	h := pr.Out.Header
	vals := make([]string, 2)
	vals[1] = pr.In.Host
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		vals[0] = ip
		if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
			vals[0] = strings.Join(prior, ", ") + ", " + ip
		}
		h["X-Forwarded-For"] = vals[0:1:1]
	}
	h["X-Forwarded-Host"] = vals[1:2:2]
	if pr.In.TLS == nil {
		h["X-Forwarded-Proto"] = protoHTTP
	} else {
		h["X-Forwarded-Proto"] = protoHTTPS
	}
	if _, ok := h["User-Agent"]; !ok {
		// What ReverseProxy would set next (no Go default User-Agent
		// towards the cell), without its allocation.
		h["User-Agent"] = noUserAgent
	}
}

// Shared X-Forwarded-Proto values: set by reference, never modified.
var (
	protoHTTP   = []string{"http"}
	protoHTTPS  = []string{"https"}
	noUserAgent = []string{""}
)

// onResponse counts the cell's answer. Any answer, even a 5xx, proves the
// cell is reachable: a cell's 500 or a tenant bulkhead's 503 is about one
// request or one tenant, not the cell, so it never ejects.
//
// A status outside 100-599 is a malformed answer (the cell's fault): the
// router never writes a non-standard code on the wire, so it answers 502.
func (b *backend) onResponse(resp *http.Response) error {
	if resp.StatusCode > 599 {
		return errBadStatus
	}
	b.count(resp.StatusCode)
	spanStatus(resp.Request, resp.StatusCode, "")
	if b.passiveFails.Load() != 0 {
		b.passiveFails.Store(0)
	}
	return nil
}

// onError handles an error forwarding a request. Only the cell's faults
// count against the cell: a refused connection, a reset or closed
// connection, a timeout waiting for its answer, a malformed answer. What
// the client did never does: a request whose body the client failed to
// send (a malformed chunk, a stall past the body deadline, a connection
// that ended early) is answered 400 or 408 and its connection closed, and
// a client that went away gets nothing (the connection is aborted).
//
// A failed connection attempt means the request never reached the cell:
// the cell is marked down at once and the client gets the same 503 +
// Retry-After as every later request until the cell is back. Other cell
// errors answer 502/504 and eject the cell after FailAfter in a row.
func (b *backend) onError(w http.ResponseWriter, r *http.Request, err error) {
	head := r.Method == http.MethodHead
	if body, ok := r.Context().Value(bodyKey{}).(*httpguard.Body); ok {
		if failed, slow := body.Failed(); failed {
			b.clientFaults.Add(1)
			setRequestID(w, r)
			httpguard.CloseAfter(w)
			prob := httpguard.ErrBodyMalformed
			if slow {
				prob = httpguard.ErrBodyTooSlow
			}
			b.count(prob.Status)
			refusedSpan(w, r, prob)
			prob.Write(w, head)
			return
		}
	}
	if r.Context().Err() != nil {
		// The client went away; nothing to say about the cell, and no one
		// to answer: abort the connection, as net/http does for a handler
		// that panics with ErrAbortHandler. Counted under 499 (nginx's
		// code for it), never as the cell's 5xx.
		b.clientFaults.Add(1)
		b.count(statusClientGone)
		spanStatus(r, statusClientGone, "client went away")
		if a := accessOf(w); a != nil {
			a.status = statusClientGone
		}
		panic(http.ErrAbortHandler)
	}
	var op *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		b.errDial.Add(1)
		b.eject(false, err)
		b.count(http.StatusServiceUnavailable)
		refusedSpan(w, r, b.probDown)
		setRequestID(w, r)
		b.probDown.Write(w, head)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		b.errTimeout.Add(1)
		b.count(http.StatusGatewayTimeout)
		spanStatus(r, http.StatusGatewayTimeout, err.Error())
		b.failedRequest(err)
		setRequestID(w, r)
		answered(w, b.probTimeout)
		b.probTimeout.Write(w, head)
	default:
		b.errOther.Add(1)
		b.count(http.StatusBadGateway)
		spanStatus(r, http.StatusBadGateway, err.Error())
		b.failedRequest(err)
		setRequestID(w, r)
		answered(w, b.probFailed)
		b.probFailed.Write(w, head)
	}
}

// failedRequest counts a transport error that is not a refused connection.
func (b *backend) failedRequest(err error) {
	if n := b.passiveFails.Add(1); int(n) >= b.p.cfg.FailAfter {
		b.eject(false, err)
	} else {
		b.mu.Lock()
		b.lastErr, b.lastErrAt = err.Error(), b.p.cfg.Now()
		b.mu.Unlock()
		b.log.Warn("request to cell failed", "error", err.Error())
	}
}

// refuse answers a request the router does not forward, with prob (a
// 503).
func (b *backend) refuse(w http.ResponseWriter, r *http.Request, prob *httpguard.Problem) {
	b.count(prob.Status)
	refusedSpan(w, r, prob)
	setRequestID(w, r)
	w.Header()[b.p.cellHeader] = b.nameValue
	if r.ContentLength != 0 {
		// The body is not read: closing beats net/http's discarding it
		// first, which a stalled body would hold up.
		httpguard.CloseAfter(w)
	}
	prob.Write(w, r.Method == http.MethodHead)
}

// statusClientGone is the code a request whose client went away is
// counted under: nobody receives it.
const statusClientGone = 499

func (b *backend) count(code int) {
	if code == statusClientGone {
		b.clientGone.Add(1)
		return
	}
	i := code/100 - 1
	if i < 0 || i > 4 {
		i = 4
	}
	b.codes[i].Add(1)
}

// eject marks the cell down (active: by a health check).
func (b *backend) eject(active bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.up.Load() {
		return
	}
	b.up.Store(false)
	b.passiveFails.Store(0)
	b.downSince = b.p.cfg.Now()
	if err != nil {
		b.lastErr, b.lastErrAt = err.Error(), b.downSince
	}
	// Pooled connections to a dead cell are dead too; dropping them now
	// keeps the first requests after its return from failing on them.
	b.transport.CloseIdleConnections()
	cause := "passive"
	if active {
		b.ejectActive.Add(1)
		cause = "active"
	} else {
		b.ejectPassive.Add(1)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	b.log.Warn("cell down; its tenants get 503 until a health check passes", "cause", cause, "error", msg)
}

// check runs one active health check and applies its result.
func (b *backend) check(ctx context.Context) {
	err := b.probe(ctx)
	if ctx.Err() != nil {
		return // shutting down or removed: say nothing about the cell
	}
	b.mu.Lock()
	if err == nil {
		b.activeFails = 0
		if !b.up.Load() {
			b.passiveFails.Store(0)
			b.up.Store(true)
			b.downSince = time.Time{}
			b.log.Info("cell up")
		}
		b.mu.Unlock()
		return
	}
	b.activeFails++
	b.lastErr, b.lastErrAt = err.Error(), b.p.cfg.Now()
	var op *net.OpError
	down := b.activeFails >= b.p.cfg.FailAfter || (errors.As(err, &op) && op.Op == "dial")
	b.mu.Unlock()
	if down {
		b.eject(true, err)
	}
}

func (b *backend) probe(ctx context.Context) error {
	u := *b.target
	u.Path = strings.TrimSuffix(u.Path, "/") + b.p.cfg.CheckPath
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := b.health.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errors.New(b.p.cfg.CheckPath + " answered " + strconv.Itoa(resp.StatusCode))
	}
	return nil
}

// start runs the health loop: a check now, then one per interval.
func (b *backend) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		t := time.NewTicker(b.p.cfg.HealthInterval)
		defer t.Stop()
		for {
			b.check(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends the health loop and drops idle connections; requests in
// flight finish on their own connections.
func (b *backend) stop() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
	}
	b.transport.CloseIdleConnections()
}
