package proxy

import (
	"context"
	"sync"
	"time"
)

// connContext is the context of the requests of one own-loop connection
// (front.go), reused from request to request: it is cancelled when the
// client goes away during a request, and reset when the request ends.
//
// Why: a context.WithCancel per request, the request copy that carries
// it and a context.AfterFunc per forwarded request (directConn aborting
// its read) are six allocations and a lock-and-map dance with the parent
// per request. Requests on one connection run one at a time, so one
// context serves them all; directConn registers its abort hook with
// afterFunc instead of context.AfterFunc. Nothing may keep it past its
// request: the lean path keeps none.
type connContext struct {
	mu     sync.Mutex
	done   chan struct{} // made by the request's first Done
	err    error
	after  func() // the registered hook, until it runs or is stopped
	ran    bool   // the hook ran
	stopFn func() bool
}

func newConnContext() *connContext {
	c := &connContext{}
	c.stopFn = c.stopAfter // once: a method value per request would allocate
	return c
}

// Deadline implements context.Context: none.
func (c *connContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Value implements context.Context: no values, as context.Background.
func (c *connContext) Value(any) any { return nil }

// Done implements context.Context.
func (c *connContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

// Err implements context.Context.
func (c *connContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel cancels the running request, running its hook if one is
// registered.
func (c *connContext) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	f := c.after
	c.after, c.ran = nil, f != nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// afterFunc is context.AfterFunc for this context: f runs when the request
// is cancelled (at once if it is already), and stop unregisters it,
// reporting false if it ran. One hook at a time.
func (c *connContext) afterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.ran = true
		c.mu.Unlock()
		f()
		return c.stopFn
	}
	c.after, c.ran = f, false
	c.mu.Unlock()
	return c.stopFn
}

func (c *connContext) stopAfter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.after = nil
	return !c.ran
}

// end ends the request: a Done channel handed out is closed, as the
// request's context would be, and the next request starts afresh.
func (c *connContext) end() {
	c.mu.Lock()
	if c.done != nil && c.err == nil {
		close(c.done)
	}
	c.done, c.err, c.after, c.ran = nil, nil, nil, false
	c.mu.Unlock()
}

var _ context.Context = (*connContext)(nil)
