package httpguard

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// BodyLimits bound how slowly a request body may arrive.
type BodyLimits struct {
	// Timeout bounds the whole body from the end of the head; 0: none.
	Timeout time.Duration
	// Rate is the slowest a body may arrive, in bytes per second, after
	// Grace; 0: no minimum.
	Rate int64
	// Grace is the time a body may take before Rate applies.
	Grace time.Duration
}

// Off reports whether the limits bound nothing.
func (l BodyLimits) Off() bool { return l.Timeout <= 0 && l.Rate <= 0 }

// The marks of a failed body read: errBodyTooSlow for a read cut by the
// body's deadlines, so it is not mistaken for another deadline (a database
// call's, which may wrap the same os.ErrDeadlineExceeded), and
// errBodyMalformed for a body the client broke (a malformed chunk, a body
// cut short).
var (
	errBodyTooSlow   = errors.New("request body too slow")
	errBodyMalformed = errors.New("request body malformed or incomplete")
)

// BodyTooSlow reports whether err is a body read cut by Body's deadlines:
// answer it ErrBodyTooSlow.
func BodyTooSlow(err error) bool { return errors.Is(err, errBodyTooSlow) }

// BodyMalformed reports whether err is a Body read that failed by the
// client's doing, other than by its deadlines or a size limit: answer it
// ErrBodyMalformed.
func BodyMalformed(err error) bool { return errors.Is(err, errBodyMalformed) }

// bodyError is a failed read of a Body: the cause, marked.
type bodyError struct{ mark, err error }

func (e *bodyError) Error() string        { return e.mark.Error() + ": " + e.err.Error() }
func (e *bodyError) Unwrap() error        { return e.err }
func (e *bodyError) Is(target error) bool { return target == e.mark }

// Body is a request body bounded by BodyLimits. Before every read it sets
// the connection's read deadline (through w's ResponseController): the
// hard deadline, or sooner the moment the body falls below the minimum
// rate. Only time spent inside Read counts towards the rate, so a handler
// that reads late (it waited for a permit or a database) is not mistaken
// for a slow client: after n bytes and w spent waiting, the next read may
// wait grace + n/rate - w. A read cut by the deadlines fails with an error
// BodyTooSlow reports; any other failed read but a size limit's, with one
// BodyMalformed reports.
//
// It remembers a read error (a malformed chunk, a stall, a connection that
// ends early), so that a proxy whose transport read the body can tell the
// client's fault from the next hop's (Failed).
type Body struct {
	body   io.ReadCloser
	rc     *http.ResponseController
	limits BodyLimits
	hard   time.Time // zero: none
	n      int64
	waited time.Duration

	done     atomic.Bool // EOF, an error or Close: the deadline is no longer the body's
	failed   atomic.Bool
	timedOut atomic.Bool
}

// NewBody returns body bounded by l; start is the end of the head. With l
// off it only remembers a failed read.
func NewBody(w http.ResponseWriter, body io.ReadCloser, l BodyLimits, start time.Time) *Body {
	b := &Body{body: body, limits: l}
	if !l.Off() {
		b.rc = http.NewResponseController(w)
	}
	if l.Timeout > 0 {
		b.hard = start.Add(l.Timeout)
	}
	return b
}

// deadline is when the next read must have its bytes, from now.
func (b *Body) deadline(now time.Time) time.Time {
	dl := b.hard
	if l := b.limits; l.Rate > 0 {
		budget := l.Grace + time.Duration(b.n)*time.Second/time.Duration(l.Rate) - b.waited
		if rd := now.Add(budget); dl.IsZero() || rd.Before(dl) {
			dl = rd
		}
	}
	return dl
}

// Read reads the body within its deadlines.
func (b *Body) Read(p []byte) (int, error) {
	if b.rc == nil || b.done.Load() {
		n, err := b.body.Read(p)
		return n, b.note(err)
	}
	now := time.Now()
	if err := b.rc.SetReadDeadline(b.deadline(now)); errors.Is(err, http.ErrNotSupported) {
		b.rc = nil // not on net/http's server: no deadlines
	}
	n, err := b.body.Read(p)
	b.waited += time.Since(now)
	b.n += int64(n)
	if err == io.EOF && b.rc != nil {
		// The whole body is in. Clear the deadline: net/http's reader of
		// the connection keeps reading while the handler runs, and a
		// deadline passing there would cancel the request's context.
		b.done.Store(true)
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, b.note(err)
}

// note records how a read ended and marks a failure.
func (b *Body) note(err error) error {
	if err == nil {
		return nil
	}
	b.done.Store(true)
	if err == io.EOF {
		return err
	}
	b.failed.Store(true)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err // the server's limit, answered ErrBodyTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
		return &bodyError{errBodyTooSlow, err}
	}
	return &bodyError{errBodyMalformed, err}
}

// Close closes the body.
func (b *Body) Close() error {
	b.done.Store(true)
	return b.body.Close()
}

// Finish runs when the handler returns: what it left unread net/http
// drains (up to 256 KiB) before the next request, and that drain must
// keep to the same deadlines, or a stalled body would hold the connection.
func (b *Body) Finish() {
	if b.rc != nil && !b.done.Load() {
		_ = b.rc.SetReadDeadline(b.deadline(time.Now()))
	}
}

// Failed reports whether reading the body failed, and whether it failed
// because the client was too slow. Safe from any goroutine.
func (b *Body) Failed() (failed, slow bool) { return b.failed.Load(), b.timedOut.Load() }
