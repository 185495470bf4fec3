package proxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// clientBody is a forwarded request's body as the router reads it from the
// client. It does two things:
//
//   - It bounds a slow client: before each read it moves the connection's
//     read deadline to start + grace + bytes read / minimum rate, capped at
//     start + timeout, so a body that stalls (or trickles below the rate)
//     fails within the grace period instead of holding its tenant's and
//     its cell's in-flight slots for as long as the client likes.
//   - It remembers a read error (a malformed chunk, a stall past the
//     deadline, a connection that ends before the body does), so the error
//     path can tell the client's fault from the cell's: a request whose
//     body failed is answered 400 or 408 and never counts against the cell
//     (backend.onError).
//
// It is read by the transport's writer goroutine while the handler waits
// for the answer, hence the atomics.
type clientBody struct {
	body     io.ReadCloser
	rc       *http.ResponseController // nil: no deadlines (not on net/http's server)
	start    time.Time
	limit    time.Time // start + timeout; zero: none
	grace    time.Duration
	rate     int64 // bytes per second; 0: no minimum rate
	n        atomic.Int64
	done     atomic.Bool // EOF, an error or Close: the deadline is no longer ours
	err      atomic.Pointer[error]
	timedOut atomic.Bool
}

// clientBodyKey holds a forwarded request's clientBody in its context.
type clientBodyKey struct{}

// bodyLimits are a Proxy's bounds on reading a client's body.
type bodyLimits struct {
	timeout time.Duration // 0: none
	grace   time.Duration
	rate    int64 // bytes per second, 0: none
}

func (l bodyLimits) off() bool { return l.timeout <= 0 && l.rate <= 0 }

func newClientBody(w http.ResponseWriter, body io.ReadCloser, l bodyLimits, now time.Time) *clientBody {
	b := &clientBody{body: body, start: now, grace: l.grace, rate: l.rate}
	if !l.off() {
		b.rc = http.NewResponseController(w)
	}
	if l.timeout > 0 {
		b.limit = now.Add(l.timeout)
	}
	return b
}

// deadline is the latest time the next read may end.
func (b *clientBody) deadline() time.Time {
	var d time.Time
	if b.rate > 0 {
		d = b.start.Add(b.grace + time.Duration(float64(b.n.Load())/float64(b.rate)*float64(time.Second)))
	}
	if !b.limit.IsZero() && (d.IsZero() || b.limit.Before(d)) {
		d = b.limit
	}
	return d
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.rc != nil && !b.done.Load() {
		// Once the body is done net/http's server starts its own read of
		// the connection (to notice the client going away): a deadline
		// set then would end that read and cancel the request.
		if err := b.rc.SetReadDeadline(b.deadline()); errors.Is(err, http.ErrNotSupported) {
			b.rc = nil
		}
	}
	n, err := b.body.Read(p)
	b.n.Add(int64(n))
	if err != nil {
		b.done.Store(true)
		if err != io.EOF {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				b.timedOut.Store(true)
			}
			b.err.CompareAndSwap(nil, &err)
		}
	}
	return n, err
}

func (b *clientBody) Close() error {
	b.done.Store(true)
	return b.body.Close()
}

// failed reports whether reading the client's body failed, and whether it
// failed because the client was too slow.
func (b *clientBody) failed() (failed, slow bool) {
	return b.err.Load() != nil, b.timedOut.Load()
}
