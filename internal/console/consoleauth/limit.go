package consoleauth

import (
	"errors"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LimiterConfig shapes a Limiter. Zero fields take the defaults below.
type LimiterConfig struct {
	// Free is how many failures in a row a source has before backoff.
	Free int
	// Base is the first backoff; each further failure doubles it up to Max.
	Base, Max time.Duration
	// Forget clears a source's failures after this long without one.
	Forget time.Duration
	// MaxSources bounds the sources tracked: when full, the forgotten ones
	// are swept, then the one whose backoff ends first makes room.
	MaxSources int
	// GlobalRate and GlobalBurst bound the failed attempts of all sources
	// together (a token bucket per second). While it is empty, sources
	// that have failed are refused; a source with no failure is always
	// heard, so an operator cannot be locked out by others' guessing.
	GlobalRate  float64
	GlobalBurst int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// The defaults of LimiterConfig.
const (
	DefaultFree        = 5
	DefaultBase        = time.Second
	DefaultMax         = 5 * time.Minute
	DefaultForget      = time.Hour
	DefaultMaxSources  = 10_000
	DefaultGlobalRate  = 10
	DefaultGlobalBurst = 100
)

// Limiter throttles failed credentials per source (an IP address; IPv6 by
// its /64) with an exponential backoff, and all sources together with a
// bounded global bucket. Safe for concurrent use; its state is bounded by
// MaxSources.
type Limiter struct {
	cfg LimiterConfig

	mu      sync.Mutex
	sources map[string]*source
	tokens  float64
	filled  time.Time
}

type source struct {
	fails int       // failures in a row
	last  time.Time // last failure
	until time.Time // refused before this
}

// NewLimiter builds a Limiter.
func NewLimiter(c LimiterConfig) *Limiter {
	if c.Free <= 0 {
		c.Free = DefaultFree
	}
	if c.Base <= 0 {
		c.Base = DefaultBase
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.Forget <= 0 {
		c.Forget = DefaultForget
	}
	if c.MaxSources <= 0 {
		c.MaxSources = DefaultMaxSources
	}
	if c.GlobalRate <= 0 {
		c.GlobalRate = DefaultGlobalRate
	}
	if c.GlobalBurst <= 0 {
		c.GlobalBurst = DefaultGlobalBurst
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Limiter{cfg: c, sources: map[string]*source{}, tokens: float64(c.GlobalBurst), filled: c.Now()}
}

// sourceKey is an address's source: IPv6 addresses by their /64, which one
// host usually holds whole.
func sourceKey(remote string) string {
	a, err := netip.ParseAddr(remote)
	if err != nil {
		return remote
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// refill adds the global bucket's tokens since the last call; l.mu held.
func (l *Limiter) refill(now time.Time) {
	if d := now.Sub(l.filled); d > 0 {
		l.tokens = math.Min(float64(l.cfg.GlobalBurst), l.tokens+d.Seconds()*l.cfg.GlobalRate)
		l.filled = now
	}
}

// get returns remote's record, dropping it when forgotten; l.mu held.
func (l *Limiter) get(key string, now time.Time) *source {
	s := l.sources[key]
	if s != nil && now.Sub(s.last) >= l.cfg.Forget {
		delete(l.sources, key)
		return nil
	}
	return s
}

// Allow says whether remote may present a credential now: "" when it may,
// else the reason ("backoff": this source; "global": every failing source)
// and how long to wait.
func (l *Limiter) Allow(remote string) (time.Duration, string) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(sourceKey(remote), now)
	if s == nil {
		return 0, ""
	}
	if now.Before(s.until) {
		return s.until.Sub(now), "backoff"
	}
	l.refill(now)
	if l.tokens < 1 {
		return time.Duration((1 - l.tokens) / l.cfg.GlobalRate * float64(time.Second)), "global"
	}
	return 0, ""
}

// Fail records a wrong credential from remote and returns the backoff it
// now has (0 while its failures are still free).
func (l *Limiter) Fail(remote string) time.Duration {
	now := l.cfg.Now()
	key := sourceKey(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)
	l.tokens = math.Max(0, l.tokens-1)
	s := l.get(key, now)
	if s == nil {
		if len(l.sources) >= l.cfg.MaxSources {
			l.makeRoom(now)
		}
		s = &source{}
		l.sources[key] = s
	}
	s.fails++
	s.last = now
	var wait time.Duration
	if n := s.fails - l.cfg.Free; n > 0 {
		wait = l.cfg.Max
		if n <= 30 {
			wait = min(l.cfg.Max, l.cfg.Base<<(n-1))
		}
		s.until = now.Add(wait)
	}
	return wait
}

// makeRoom sweeps forgotten sources, else drops the one whose backoff ends
// first; l.mu held.
func (l *Limiter) makeRoom(now time.Time) {
	first, firstUntil := "", time.Time{}
	for k, s := range l.sources {
		if now.Sub(s.last) >= l.cfg.Forget {
			delete(l.sources, k)
			continue
		}
		if first == "" || s.until.Before(firstUntil) {
			first, firstUntil = k, s.until
		}
	}
	if len(l.sources) >= l.cfg.MaxSources {
		delete(l.sources, first)
	}
}

// Succeed clears remote's failures (its right credential).
func (l *Limiter) Succeed(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sources, sourceKey(remote))
}

// Sources returns how many sources the limiter tracks.
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources)
}

// Metrics counts the consoles' refused credentials:
// cellgate_console_auth_refusals_total{console, kind, reason}, with console
// "cell" or "router", kind "login" or "bearer" and reason "wrong_token",
// "backoff" or "global".
type Metrics struct {
	refusals *prometheus.CounterVec
}

// NewMetrics registers the counter on reg (nil: none); a counter already
// registered there by another console is shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellgate_console_auth_refusals_total",
		Help: "Console credentials refused: wrong tokens, and attempts refused by the per-source backoff or the global limit.",
	}, []string{"console", "kind", "reason"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			c = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return &Metrics{refusals: c}, nil
}

func (m *Metrics) refused(console, kind, reason string) {
	if m != nil {
		m.refusals.WithLabelValues(console, kind, reason).Inc()
	}
}
