package bulkhead

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Limiter is the server-wide admission limit: an exact cap on requests in
// flight, shared by every tenant. It always counts, so InFlight is a true
// gauge even with no cap.
type Limiter struct {
	max int64
	_   [120]byte // keep the hot counter off max's cache line
	n   atomic.Int64
	_   [120]byte
}

// NewLimiter returns a limiter admitting at most max requests at once; 0
// means no limit (requests are still counted).
func NewLimiter(max int) (*Limiter, error) {
	if max < 0 {
		return nil, fmt.Errorf("bulkhead: Limiter max: must be >= 0 (0 = no limit), got %d", max)
	}
	return &Limiter{max: int64(max)}, nil
}

// TryAcquire takes a unit if one is free. It never waits.
func (l *Limiter) TryAcquire() bool {
	if l.max == 0 {
		l.n.Add(1)
		return true
	}
	for {
		n := l.n.Load()
		if n >= l.max {
			return false
		}
		if l.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release gives back a unit taken by TryAcquire.
func (l *Limiter) Release() { l.n.Add(-1) }

// InFlight returns the units held now.
func (l *Limiter) InFlight() int64 { return l.n.Load() }

// Max returns the cap (0 = none).
func (l *Limiter) Max() int64 { return l.max }

// AdmissionConfig configures the server-wide admission middleware.
type AdmissionConfig struct {
	// Skipper selects requests that are never counted (public paths and
	// probes). Default: count every request.
	Skipper middleware.Skipper
	// Limiter holds the server-wide cap. Required.
	Limiter *Limiter
	// Rejections counts refused requests; nil counts nothing.
	Rejections prometheus.Counter
	// Rejection is the answer to a refused request. Default:
	// ErrServerOverloaded (503, Retry-After: 1).
	Rejection *Rejection
}

// DefaultAdmissionConfig holds the defaults AdmissionWithConfig applies to
// zero fields.
var DefaultAdmissionConfig = AdmissionConfig{
	Skipper:   middleware.DefaultSkipper,
	Rejection: ErrServerOverloaded,
}

// AdmissionWithConfig returns the server-wide admission middleware. Each
// counted request takes a Limiter unit before the handler and gives it back
// when the response head is written or the handler returns; a full limiter
// answers cfg.Rejection without calling the handler.
func AdmissionWithConfig(cfg AdmissionConfig) (echo.MiddlewareFunc, error) {
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultAdmissionConfig.Skipper
	}
	if cfg.Rejection == nil {
		cfg.Rejection = DefaultAdmissionConfig.Rejection
	}
	if cfg.Limiter == nil {
		return nil, errors.New("bulkhead: AdmissionConfig.Limiter: required")
	}
	m := &admissionMW{cfg: cfg}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return m.serve(c, next) }
	}, nil
}

type admissionMW struct{ cfg AdmissionConfig }

func (m *admissionMW) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.cfg.Skipper(c) {
		return next(c)
	}
	l := m.cfg.Limiter
	if !l.TryAcquire() {
		if m.cfg.Rejections != nil {
			m.cfg.Rejections.Inc()
		}
		return m.cfg.Rejection.Write(c)
	}
	res := c.Response()
	g, installed := install(res, heldServer)
	g.server = l
	g.held.Or(heldServer)
	defer g.finish(res, heldServer, installed)
	return next(c)
}
