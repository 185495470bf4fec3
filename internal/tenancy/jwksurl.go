package tenancy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Defaults of a JWKS URL key set (JWTConfig.KeySetURL).
const (
	// DefaultKeySetRefresh is how often the key set is fetched on schedule.
	// Providers announce a new key well ahead of signing with it (Auth0,
	// Okta, Entra: days), and an unknown kid fetches at once anyway.
	DefaultKeySetRefresh = 15 * time.Minute
	// DefaultUnknownKIDInterval is the least time between two fetches an
	// unknown kid may cause.
	DefaultUnknownKIDInterval = 10 * time.Second
	// DefaultKeySetTimeout bounds one fetch.
	DefaultKeySetTimeout = 10 * time.Second

	// maxJWKSBytes bounds a fetched document: a set of a few public keys
	// with their certificates is a few KiB.
	maxJWKSBytes = 1 << 20
	// maxKIDBytes bounds the kid a token may make the server fetch for.
	maxKIDBytes = 256
)

// KeySetStatus is the state of the key set fetched from a JWKS URL.
type KeySetStatus struct {
	// URL is the JWKS URL.
	URL string `json:"url"`
	// Keys is the number of keys tokens are verified with now.
	Keys int `json:"keys"`
	// FetchedAt is when those keys were fetched; zero while no fetch has
	// succeeded.
	FetchedAt time.Time `json:"fetched_at"`
	// LastAttempt is when the last fetch, good or not, ended.
	LastAttempt time.Time `json:"last_attempt"`
	// LastError is the last fetch's error; "" when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Stale is true when the last fetch failed, or none has succeeded: the
	// keys of FetchedAt (perhaps none) are still used.
	Stale bool `json:"stale"`
	// Skipped lists the keys of the last good document that verify
	// nothing here ("kid: reason"): another family, use "enc", too weak.
	Skipped []string `json:"skipped,omitempty"`
}

// Problem says in one sentence what is wrong with the key set, or "" when
// nothing is: the readiness detail of a server whose provider is down.
func (s KeySetStatus) Problem() string {
	switch {
	case !s.Stale:
		return ""
	case s.FetchedAt.IsZero():
		return fmt.Sprintf("no key set fetched from %s yet (last error at %s: %s); every token is refused until a fetch succeeds",
			s.URL, s.LastAttempt.UTC().Format(time.RFC3339), s.LastError)
	default:
		return fmt.Sprintf("stale: the last fetch of %s failed at %s (%s); tokens are verified with the %d keys fetched at %s",
			s.URL, s.LastAttempt.UTC().Format(time.RFC3339), s.LastError, s.Keys, s.FetchedAt.UTC().Format(time.RFC3339))
	}
}

// KeySetReporter is implemented by the Extractor NewExtractor returns.
// KeySetStatus reports the state of its JWKS URL key set; ok is false when
// it has none (another source, or keys from a file or the environment).
type KeySetReporter interface {
	KeySetStatus() (status KeySetStatus, ok bool)
}

// KeySetStatus implements KeySetReporter.
func (x *extractor) KeySetStatus() (KeySetStatus, bool) {
	if x.remote == nil {
		return KeySetStatus{}, false
	}
	return x.remote.snapshot(), true
}

// Close stops the background refresh of a JWKS URL key set; tokens are
// still verified with the keys held. A no-op for every other source. It
// always returns nil.
func (x *extractor) Close() error {
	if x.remote != nil {
		x.remote.cancel()
	}
	return nil
}

// remoteSet is the key set of a JWKS URL. github.com/MicahParks/jwkset
// fetches it (at start, on schedule, and when remoteSet asks on an unknown
// kid) and hands each document to setStore, which checks every key as a key
// of JWTConfig.KeySet is checked and swaps the usable ones in whole. Tokens
// read the current set with one atomic load; a failed fetch changes nothing
// but the status, so the last good set stays in use.
type remoteSet struct {
	url      string
	family   keyFamily
	algs     []string
	now      func() time.Time
	interval time.Duration // between two fetches an unknown kid causes
	timeout  time.Duration
	log      *slog.Logger

	keys atomic.Pointer[map[string]setKey]
	// lastFetch is when the last fetch ended, or when the last fetch for an
	// unknown kid began (Unix ns of now): an unknown kid fetches only when
	// it is an interval old.
	lastFetch atomic.Int64

	client jwkset.Storage // KeyRead of an unknown kid refreshes
	cancel context.CancelFunc
	ctx    context.Context

	mu     sync.Mutex
	status KeySetStatus

	fetches *prometheus.CounterVec // by result; nil without a registry
	unknown prometheus.Counter
}

// newRemoteSet fetches the key set once (a failure leaves it empty and
// stale, and is retried: the provider being down must not keep a cell from
// starting) and starts the scheduled refresh.
func newRemoteSet(c JWTConfig, family keyFamily, now func() time.Time, log *slog.Logger, reg prometheus.Registerer) (*remoteSet, error) {
	if err := checkKeySetURL(c.KeySetURL); err != nil {
		return nil, err
	}
	if family == familyHMAC {
		return nil, configErr("JWT.KeySetURL", "HMAC algorithms %v verify with a shared secret, which a JWKS URL must never publish; use RS*, PS* or ES* with a JWKS URL, or a secret in Key", c.Algorithms)
	}
	refresh, interval, timeout := c.KeySetRefresh, c.UnknownKIDInterval, c.KeySetTimeout
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{{"JWT.KeySetRefresh", &refresh, DefaultKeySetRefresh}, {"JWT.UnknownKIDInterval", &interval, DefaultUnknownKIDInterval}, {"JWT.KeySetTimeout", &timeout, DefaultKeySetTimeout}} {
		switch {
		case *d.v < 0:
			return nil, configErr(d.field, "must not be negative, got %s", *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	s := &remoteSet{url: c.KeySetURL, family: family, algs: c.Algorithms, now: now,
		interval: interval, timeout: timeout, log: log}
	s.keys.Store(&map[string]setKey{})
	s.status = KeySetStatus{URL: c.KeySetURL, Stale: true}
	if err := s.register(reg); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.lastFetch.Store(now().UnixNano())
	store, err := jwkset.NewStorageFromHTTP(c.KeySetURL, jwkset.HTTPClientStorageOptions{
		Client:                    fetchClient(c.KeySetClient),
		Ctx:                       s.ctx,
		HTTPTimeout:               timeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshErrorHandler:       func(_ context.Context, err error) { s.failed(err) },
		RefreshInterval:           refresh,
		Storage:                   setStore{MemoryJWKSet: jwkset.NewMemoryStorage(), s: s},
	})
	if err != nil {
		s.cancel()
		return nil, configErr("JWT.KeySetURL", "%v", err)
	}
	s.client, err = jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{c.KeySetURL: store},
		// remoteSet.key decides when an unknown kid fetches, on the
		// injectable clock and without making requests wait in line; the
		// library's own limiter would queue them.
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1),
	})
	if err != nil {
		s.cancel()
		return nil, configErr("JWT.KeySetURL", "%v", err)
	}
	return s, nil
}

// checkKeySetURL accepts an absolute http or https URL without credentials
// (they would show in the readiness detail and the logs).
func checkKeySetURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return configErr("JWT.KeySetURL", "%q is not a URL: %v", raw, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return configErr("JWT.KeySetURL", "%q: scheme must be https (or http on loopback), got %q", raw, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return configErr("JWT.KeySetURL", "%q has no host", raw)
	case u.User != nil:
		return configErr("JWT.KeySetURL", "%q holds credentials; a JWKS is public, and the URL is logged", raw)
	case u.Fragment != "":
		return configErr("JWT.KeySetURL", "%q has a fragment, which is never sent", raw)
	}
	return nil
}

// fetchClient is c (default: http.DefaultTransport) with every answer
// checked by checkedTransport and no redirect from https to plain http.
func fetchClient(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	next := cmp.Or(out.Transport, http.DefaultTransport)
	out.Transport = checkedTransport{next: next}
	check := out.CheckRedirect
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("JWKS URL redirected from https to %s", req.URL.Redacted())
		}
		if len(via) >= 3 {
			return errors.New("JWKS URL redirected more than 3 times")
		}
		if check != nil {
			return check(req, via)
		}
		return nil
	}
	return &out
}

// checkedTransport reads each answer whole, up to maxJWKSBytes, and fails
// the fetch of a document that publishes any key's private part. The
// library would drop an RSA "d" that comes without its primes, leaving a
// key anyone who read the document can sign with; such a provider is
// compromised, so its document is refused whole and the last good set
// stays (reported stale), as a JWKS file with a private part is refused.
type checkedTransport struct{ next http.RoundTripper }

func (t checkedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return nil, err
	case len(body) > maxJWKSBytes:
		return nil, fmt.Errorf("JWKS document is larger than %d bytes", maxJWKSBytes)
	}
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &doc) == nil {
		for _, k := range doc.Keys {
			for _, m := range []string{"d", "p", "q", "dp", "dq", "qi"} {
				if _, ok := k[m]; ok {
					return nil, fmt.Errorf("JWKS publishes the private part (%q) of key %.64q; refusing the document", m, fmt.Sprint(k["kid"]))
				}
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// key returns the key of kid. An unknown kid fetches the set again, at
// once, unless a fetch ended (or an unknown-kid fetch began) less than the
// interval ago: then it is unknown without a fetch, so a stream of made-up
// kids costs the provider at most one request per interval, and only the
// request that won the fetch waits for it.
func (s *remoteSet) key(kid string) (setKey, bool) {
	if k, ok := (*s.keys.Load())[kid]; ok {
		return k, true
	}
	if kid == "" || len(kid) > maxKIDBytes {
		return setKey{}, false // no key of a set has such a kid
	}
	now := s.now().UnixNano()
	last := s.lastFetch.Load()
	if now-last < int64(s.interval) || !s.lastFetch.CompareAndSwap(last, now) {
		return setKey{}, false
	}
	if s.unknown != nil {
		s.unknown.Inc()
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	// The library refreshes (setStore never knows a kid, so it always does)
	// and reports the outcome to setStore.KeyReplaceAll or s.failed; the
	// answer itself is always "not found".
	_, _ = s.client.KeyRead(ctx, kid)
	k, ok := (*s.keys.Load())[kid]
	return k, ok
}

// setStore is the jwkset.Storage each fetched document is written into.
type setStore struct {
	*jwkset.MemoryJWKSet // the rest of the interface; it stays empty
	s                    *remoteSet
}

// KeyRead knows no key: tokens find keys in remoteSet.keys, and the
// library reads only to decide whether an unknown kid must refresh.
func (st setStore) KeyRead(context.Context, string) (jwkset.JWK, error) {
	return jwkset.JWK{}, jwkset.ErrKeyNotFound
}

// KeyReplaceAll takes a freshly fetched set.
func (st setStore) KeyReplaceAll(_ context.Context, given []jwkset.JWK) error {
	return st.s.replace(given)
}

// replace checks each key of a fetched document like a key of a JWKS file
// (family, strength, curve, alg, use, no private part) and, when at least
// one key is usable, swaps the usable ones in. Unlike a file, an unusable
// key is skipped rather than refusing the set: providers publish keys for
// other uses (Keycloak an RSA-OAEP "enc" key, Entra keys of every family)
// beside the signing keys. A kid listed twice makes the document ambiguous
// and refuses it whole, as does a document with no usable key.
func (s *remoteSet) replace(given []jwkset.JWK) error {
	if len(given) > maxJWKSKeys {
		return fmt.Errorf("JWKS holds %d keys, more than %d", len(given), maxJWKSKeys)
	}
	keys := make(map[string]setKey, len(given))
	seen := make(map[string]bool, len(given))
	var skipped []string
	for _, j := range given {
		m := j.Marshal()
		k := jwk{Kty: string(m.KTY), Kid: m.KID, Use: string(m.USE), Alg: string(m.ALG),
			N: m.N, E: m.E, Crv: string(m.CRV), X: m.X, Y: m.Y, D: m.D, K: m.K}
		if seen[k.Kid] && k.Kid != "" {
			return fmt.Errorf("JWKS lists kid %q twice", k.Kid)
		}
		seen[k.Kid] = true
		var reason string
		switch {
		case k.Kid == "":
			reason = "has no kid; tokens select keys by it"
		case len(k.Kid) > maxKIDBytes:
			reason = "kid is longer than 256 bytes"
		case k.Use != "" && k.Use != "sig":
			reason = fmt.Sprintf("use is %q, not \"sig\"", k.Use)
		case k.Alg != "" && !slices.Contains(s.algs, k.Alg):
			reason = fmt.Sprintf("alg %s is not one of the allowed algorithms %v", k.Alg, s.algs)
		case k.D != "":
			reason = "its private part (\"d\") is published; anyone can sign with it"
		}
		if reason == "" {
			key, err := k.public(s.family, s.algs)
			if err != nil {
				reason = err.Error()
			} else {
				keys[k.Kid] = setKey{key: key, alg: k.Alg}
				continue
			}
		}
		skipped = append(skipped, fmt.Sprintf("%.64s: %s", k.Kid, reason))
	}
	if len(keys) == 0 {
		return fmt.Errorf("JWKS holds no key usable with %v (%s)", s.algs, strings.Join(skipped, "; "))
	}
	s.keys.Store(&keys)
	now := s.now()
	s.lastFetch.Store(now.UnixNano())
	s.mu.Lock()
	s.status = KeySetStatus{URL: s.url, Keys: len(keys), FetchedAt: now, LastAttempt: now, Skipped: skipped}
	s.mu.Unlock()
	if s.fetches != nil {
		s.fetches.WithLabelValues("ok").Inc()
	}
	if len(skipped) > 0 {
		s.log.Info("tenancy: JWKS keys skipped", "url", s.url, "keys", len(keys), "skipped", skipped)
	}
	return nil
}

// failed records a failed fetch; the keys stay as they are.
func (s *remoteSet) failed(err error) {
	now := s.now()
	s.lastFetch.Store(now.UnixNano())
	s.mu.Lock()
	s.status.LastAttempt = now
	s.status.LastError = err.Error()
	s.status.Stale = true
	st := s.status
	s.mu.Unlock()
	if s.fetches != nil {
		s.fetches.WithLabelValues("error").Inc()
	}
	s.log.Warn("tenancy: JWKS fetch failed; verifying with the last good key set", "url", s.url, "error", err,
		"keys", st.Keys, "fetched_at", st.FetchedAt)
}

func (s *remoteSet) snapshot() KeySetStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Skipped = slices.Clone(st.Skipped)
	return st
}

// register adds the key set's metrics to reg (nil: none). No label names
// the URL: one process has one key set.
func (s *remoteSet) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	s.fetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellgate_tenancy_jwks_fetches_total",
		Help: "Fetches of the tenant JWT key set from its JWKS URL, by result (ok, error).",
	}, []string{"result"})
	s.fetches.WithLabelValues("ok")
	s.fetches.WithLabelValues("error")
	s.unknown = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cellgate_tenancy_jwks_unknown_kid_fetches_total",
		Help: "Fetches of the JWKS URL caused by a token with an unknown kid (at most one per unknown-kid interval).",
	})
	gauge := func(name, help string, f func(KeySetStatus) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(s.snapshot()) })
	}
	cs := []prometheus.Collector{s.fetches, s.unknown,
		gauge("cellgate_tenancy_jwks_stale", "1 when the last fetch of the JWKS URL failed (or none succeeded) and the last good key set is in use, else 0.",
			func(st KeySetStatus) float64 {
				if st.Stale {
					return 1
				}
				return 0
			}),
		gauge("cellgate_tenancy_jwks_keys", "Keys of the JWKS URL tenant tokens are verified with.",
			func(st KeySetStatus) float64 { return float64(st.Keys) }),
		gauge("cellgate_tenancy_jwks_last_success_timestamp_seconds", "When the key set in use was fetched (Unix seconds; 0: never).",
			func(st KeySetStatus) float64 {
				if st.FetchedAt.IsZero() {
					return 0
				}
				return float64(st.FetchedAt.UnixNano()) / 1e9
			}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return configErr("Registerer", "JWKS metrics: %v", err)
		}
	}
	return nil
}
