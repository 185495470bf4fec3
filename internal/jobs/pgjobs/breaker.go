package pgjobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBreakerOpen is returned by a plain enqueue while the control
// database's circuit breaker is open: recent enqueues failed, and the
// runtime fails fast instead of queueing requests behind a sick database.
var ErrBreakerOpen = errors.New("jobs: enqueue rejected: the job database's circuit breaker is open after repeated failures")

// Breaker states, as reported by cellgate_jobs_breaker_state.
const (
	breakerClosed   = 0
	breakerHalfOpen = 1
	breakerOpen     = 2
)

// breaker is a consecutive-failure circuit breaker. Closed: calls pass and
// failures are counted; the failures-th failure in a row opens it. Open:
// calls are rejected until cooldown has passed, then one call (the probe)
// passes and the breaker is half-open; the probe's success closes it, its
// failure opens it again for another cooldown. Safe for concurrent use.
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time
	state    prometheus.Gauge
	rejects  prometheus.Counter

	mu       sync.Mutex
	st       int
	fails    int
	openedAt time.Time
	probing  bool
}

func newBreaker(failures int, cooldown time.Duration, now func() time.Time) *breaker {
	b := &breaker{
		failures: failures,
		cooldown: cooldown,
		now:      now,
		state: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_jobs_breaker_state",
			Help: "State of the control database's enqueue circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
		rejects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellgate_jobs_breaker_rejections_total",
			Help: "Plain enqueues rejected at once because the enqueue circuit breaker was open.",
		}),
	}
	return b
}

func (b *breaker) register(reg *prometheus.Registry) error {
	if err := reg.Register(b.state); err != nil {
		return err
	}
	return reg.Register(b.rejects)
}

// allow reports whether a call may proceed. A call that was allowed must be
// followed by exactly one done.
func (b *breaker) allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.st {
	case breakerClosed:
		return nil
	case breakerOpen:
		if b.now().Sub(b.openedAt) >= b.cooldown {
			b.set(breakerHalfOpen)
			b.probing = true
			return nil
		}
	case breakerHalfOpen:
		if !b.probing {
			b.probing = true
			return nil
		}
	}
	b.rejects.Inc()
	return ErrBreakerOpen
}

// done records the outcome of an allowed call. A call the caller gave up on
// (context.Canceled) says nothing about the database and is not counted.
func (b *breaker) done(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := b.st == breakerHalfOpen && b.probing
	if errors.Is(err, context.Canceled) {
		if wasProbe {
			b.probing = false // let the next call probe
		}
		return
	}
	if err == nil {
		b.fails = 0
		if b.st != breakerClosed {
			b.probing = false
			b.set(breakerClosed)
		}
		return
	}
	b.fails++
	if wasProbe || (b.st == breakerClosed && b.fails >= b.failures) {
		b.probing = false
		b.openedAt = b.now()
		b.set(breakerOpen)
	}
}

func (b *breaker) set(st int) {
	b.st = st
	b.state.Set(float64(st))
}

// State reports the breaker's state as the metric does: 0 closed, 1
// half-open, 2 open.
func (b *breaker) current() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}
