package runtime

import (
	"context"
	"sync/atomic"
	"time"
)

// lazyDeadline is a request's deadline context that arms its timer only
// when something waits on it. context.WithTimeout starts a runtime timer
// and allocates twice for every request; most handlers that never block
// (a cache hit, a validation error, a bulkhead rejection) never look at
// Done, and pay for nothing here. The first Done or Err builds the real
// context.WithDeadline over the parent, with the deadline fixed when the
// request started, so what any observer sees is exactly what an eager
// WithTimeout would show: the same deadline, the parent's cancellation,
// DeadlineExceeded once the deadline passes.
type lazyDeadline struct {
	parent context.Context
	at     time.Time
	armed  atomic.Pointer[armedDeadline]
}

type armedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newLazyDeadline(parent context.Context, d time.Duration) *lazyDeadline {
	return &lazyDeadline{parent: parent, at: time.Now().Add(d)}
}

// arm returns the real deadline context, building it on first use. Racing
// callers all get the one that was published; a loser cancels its own.
func (l *lazyDeadline) arm() context.Context {
	if a := l.armed.Load(); a != nil {
		return a.ctx
	}
	ctx, cancel := context.WithDeadline(l.parent, l.at)
	if l.armed.CompareAndSwap(nil, &armedDeadline{ctx: ctx, cancel: cancel}) {
		return ctx
	}
	cancel()
	return l.armed.Load().ctx
}

// release stops the timer if one was armed. Called when the handler
// returns, like the cancel of an eager WithTimeout.
func (l *lazyDeadline) release() {
	if a := l.armed.Load(); a != nil {
		a.cancel()
	}
}

// Deadline reports the earlier of the request's deadline and the parent's.
func (l *lazyDeadline) Deadline() (time.Time, bool) {
	if d, ok := l.parent.Deadline(); ok && d.Before(l.at) {
		return d, true
	}
	return l.at, true
}

// Done arms the deadline and returns its channel.
func (l *lazyDeadline) Done() <-chan struct{} { return l.arm().Done() }

// Err arms the deadline (so Err and Done always agree) and returns its error.
func (l *lazyDeadline) Err() error { return l.arm().Err() }

// Value asks the armed context once there is one, else the parent; the
// deadline carries no values of its own. The context package, deriving a
// child (WithCancel, WithTimeout, AfterFunc), calls Done, which arms, and
// then looks up the cancelCtx behind it through Value: it must find the
// armed one, whose channel Done returned, or it watches the parent with
// a goroutine per derived context.
func (l *lazyDeadline) Value(key any) any {
	if a := l.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return l.parent.Value(key)
}
