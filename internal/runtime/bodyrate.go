package runtime

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// bodyLimits bound how slowly a request body may arrive
// (server.body_read_timeout, server.body_min_bytes_per_second,
// server.body_rate_grace). A body that misses them fails its read with a
// *bodyTooSlowError, which the error handler answers 408 with the
// connection closed.
type bodyLimits struct {
	timeout time.Duration // from the end of the head; 0: none
	rate    int64         // bytes per second; 0: no minimum
	grace   time.Duration
}

// wrap returns body bounded by the limits, or nil when there are none.
// start is the end of the head.
func (l bodyLimits) wrap(w http.ResponseWriter, body io.ReadCloser, start time.Time) *slowBodyGuard {
	if l.timeout <= 0 && l.rate <= 0 {
		return nil
	}
	b := &slowBodyGuard{ReadCloser: body, rc: http.NewResponseController(w), limits: l}
	if l.timeout > 0 {
		b.hard = start.Add(l.timeout)
	}
	return b
}

// bodyTooSlowError is a body read cut by the body's deadlines, answered
// 408 (a database call's timeout, which may wrap the same
// os.ErrDeadlineExceeded, is not the client's).
type bodyTooSlowError struct{ err error }

func (e *bodyTooSlowError) Error() string { return "request body too slow: " + e.err.Error() }
func (e *bodyTooSlowError) Unwrap() error { return e.err }

// slowBodyGuard sets the connection's read deadline before every read of
// the body: the hard deadline, or sooner the moment the body falls below
// the minimum rate. Only time spent inside Read counts towards the rate,
// so a handler that reads late (it waited for a permit or a database) is
// not mistaken for a slow client: after n bytes and w spent waiting, the
// next read may wait grace + n/rate - w.
//
// Concurrency: a request body is read by one goroutine at a time.
type slowBodyGuard struct {
	io.ReadCloser
	rc     *http.ResponseController
	limits bodyLimits
	hard   time.Time // zero: none
	n      int64
	waited time.Duration
	done   bool
}

// deadline is when the next read must have its bytes, from now.
func (b *slowBodyGuard) deadline(now time.Time) time.Time {
	dl := b.hard
	if l := b.limits; l.rate > 0 {
		budget := l.grace + time.Duration(b.n)*time.Second/time.Duration(l.rate) - b.waited
		if rd := now.Add(budget); dl.IsZero() || rd.Before(dl) {
			dl = rd
		}
	}
	return dl
}

// finish runs when the handler returns: what it left unread, net/http
// drains (up to 256 KiB) before the next request, and that drain must keep
// to the same deadlines or a stalled body holds the connection until
// read_timeout.
func (b *slowBodyGuard) finish() {
	if !b.done {
		_ = b.rc.SetReadDeadline(b.deadline(time.Now()))
	}
}

func (b *slowBodyGuard) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	now := time.Now()
	_ = b.rc.SetReadDeadline(b.deadline(now))
	n, err := b.ReadCloser.Read(p)
	b.waited += time.Since(now)
	b.n += int64(n)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &bodyTooSlowError{err}
	}
	if err == io.EOF {
		// The whole body is in. Clear the deadline: net/http's reader of
		// the connection keeps reading while the handler runs, and a
		// deadline passing there would cancel the request's context.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
