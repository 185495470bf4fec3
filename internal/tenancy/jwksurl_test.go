package tenancy

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/promtest"
)

// idp is an in-test identity provider: it serves a JWKS it can rotate, can
// go down, and counts every fetch.
type idp struct {
	mu   sync.Mutex
	doc  []byte
	down bool
	hits atomic.Int64
	hit  chan struct{} // one value per fetch, dropped when full
	srv  *httptest.Server
}

func newIDP(tb testing.TB, keys ...map[string]any) *idp {
	tb.Helper()
	p := &idp{hit: make(chan struct{}, 1024)}
	p.publish(tb, keys...)
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(p.srv.Close)
	return p
}

func (p *idp) serve(w http.ResponseWriter, r *http.Request) {
	p.hits.Add(1)
	select {
	case p.hit <- struct{}{}:
	default:
	}
	p.mu.Lock()
	doc, down := p.doc, p.down
	p.mu.Unlock()
	if down || r.URL.Path != "/jwks" {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

// publish replaces the served key set.
func (p *idp) publish(tb testing.TB, keys ...map[string]any) {
	tb.Helper()
	doc := jwks(tb, keys...)
	p.mu.Lock()
	p.doc = doc
	p.mu.Unlock()
}

func (p *idp) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func (p *idp) url() string { return p.srv.URL + "/jwks" }

// waitHits waits until the provider has served n fetches in all.
func (p *idp) waitHits(tb testing.TB, n int64) {
	tb.Helper()
	deadline := time.After(10 * time.Second)
	for p.hits.Load() < n {
		select {
		case <-p.hit:
		case <-deadline:
			tb.Fatalf("the provider saw %d fetches in 10s, want %d", p.hits.Load(), n)
		}
	}
}

// testClock is a clock tests move by hand.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(testNow.UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// urlExtractor builds a jwt extractor on p's key set with RS256 (ES256 when
// es is true), the clock clk and a fresh registry; mod adjusts the config.
func urlExtractor(tb testing.TB, p *idp, clk *testClock, es bool, mod func(*JWTConfig)) (*extractor, *prometheus.Registry) {
	tb.Helper()
	reg := prometheus.NewRegistry()
	alg := "RS256"
	if es {
		alg = "ES256"
	}
	jc := JWTConfig{Algorithms: []string{alg}, KeySetURL: p.url(), KeySetRefresh: time.Hour}
	if mod != nil {
		mod(&jc)
	}
	x, err := NewExtractor(Config{Source: SourceJWT, JWT: jc, Now: clk.now, Registerer: reg})
	if err != nil {
		tb.Fatalf("NewExtractor: %v", err)
	}
	tb.Cleanup(func() { _ = x.(*extractor).Close() })
	return x.(*extractor), reg
}

func rsaToken(tb testing.TB, i int, kid string, claims jwt.MapClaims) string {
	tb.Helper()
	return mintKid(tb, jwt.SigningMethodRS256, rsaKeys()[i], kid, claims, nil)
}

// TestJWKSURLKeyPublishedLaterAccepted: a key the provider publishes after
// the extractor started verifies on the first token that names it once the
// unknown-kid interval since the last fetch has passed, with one fetch.
func TestJWKSURLKeyPublishedLaterAccepted(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	clk := newTestClock()
	x, reg := urlExtractor(t, p, clk, false, nil)
	if got := p.hits.Load(); got != 1 {
		t.Fatalf("%d fetches at start, want 1", got)
	}
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantID(t, id, err, "acme")

	p.publish(t, rsaJWK("a", &rsaKeys()[0].PublicKey), rsaJWK("b", &rsaKeys()[1].PublicKey))
	tokB := rsaToken(t, 1, "b", goodClaims("beta"))
	// Within the interval of the start's fetch: unknown, and no fetch.
	clk.advance(DefaultUnknownKIDInterval - time.Millisecond)
	id, err = x.Extract(bearerRequest(t, tokB))
	if e := wantKind(t, id, err, KindUnauthenticated); e.Reason != "token signed with an unknown key" {
		t.Fatalf("reason %q", e.Reason)
	}
	if got := p.hits.Load(); got != 1 {
		t.Fatalf("%d fetches, want 1: an unknown kid fetched within the interval", got)
	}
	clk.advance(time.Millisecond)
	id, err = x.Extract(bearerRequest(t, tokB))
	wantID(t, id, err, "beta")
	id, err = x.Extract(bearerRequest(t, tokB))
	wantID(t, id, err, "beta")
	if got := p.hits.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2", got)
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_unknown_kid_fetches_total"); got != 1 {
		t.Fatalf("unknown-kid fetches metric %v, want 1", got)
	}
	if got := promtest.Value(t, reg, `cellgate_tenancy_jwks_fetches_total{result="ok"}`); got != 2 {
		t.Fatalf("ok fetches metric %v, want 2", got)
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_keys"); got != 2 {
		t.Fatalf("keys metric %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 6 {
		t.Fatalf("%d series (%v), want 6", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}

	// A key the provider drops stops verifying after the next fetch.
	p.publish(t, rsaJWK("b", &rsaKeys()[1].PublicKey))
	clk.advance(DefaultUnknownKIDInterval)
	_, _ = x.Extract(bearerRequest(t, rsaToken(t, 1, "zz", goodClaims("beta")))) // an unknown kid fetches
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantKind(t, id, err, KindUnauthenticated)
}

// TestJWKSURLScheduledRefresh: with no token asking, the scheduled refresh
// brings a newly published key within one refresh.
func TestJWKSURLScheduledRefresh(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	clk := newTestClock()
	x, reg := urlExtractor(t, p, clk, false, func(c *JWTConfig) {
		c.KeySetRefresh = 20 * time.Millisecond
		c.UnknownKIDInterval = time.Hour
	})
	p.publish(t, rsaJWK("b", &rsaKeys()[1].PublicKey))
	// The refresh goroutine fetches, stores, then waits for its next tick:
	// when the provider sees the second fetch after publishing, the first
	// one's set is in place.
	p.waitHits(t, p.hits.Load()+2)
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 1, "b", goodClaims("beta"))))
	wantID(t, id, err, "beta")
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantKind(t, id, err, KindUnauthenticated) // dropped by the provider
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_unknown_kid_fetches_total"); got != 0 {
		t.Fatalf("unknown-kid fetches %v, want 0: the schedule alone must bring the key", got)
	}
}

// TestJWKSURLProviderDown: with the provider down, tokens of the keys held
// still verify, the set is reported stale, and it recovers on the next
// fetch after the provider is back.
func TestJWKSURLProviderDown(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	clk := newTestClock()
	x, reg := urlExtractor(t, p, clk, false, nil)
	tokA := rsaToken(t, 0, "a", goodClaims("acme"))
	if st, ok := x.KeySetStatus(); !ok || st.Stale || st.Keys != 1 || st.Problem() != "" {
		t.Fatalf("status at start %+v (%v), problem %q", st, ok, st.Problem())
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_stale"); got != 0 {
		t.Fatalf("stale %v at start", got)
	}

	p.setDown(true)
	clk.advance(DefaultUnknownKIDInterval)
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 1, "new", goodClaims("beta"))))
	wantKind(t, id, err, KindUnauthenticated)
	if got := p.hits.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2 (start, unknown kid)", got)
	}
	for range 3 {
		id, err = x.Extract(bearerRequest(t, tokA))
		wantID(t, id, err, "acme")
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_stale"); got != 1 {
		t.Fatalf("stale %v with the provider down, want 1", got)
	}
	if got := promtest.Value(t, reg, `cellgate_tenancy_jwks_fetches_total{result="error"}`); got != 1 {
		t.Fatalf("error fetches %v, want 1", got)
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_last_success_timestamp_seconds"); got != float64(testNow.Unix()) {
		t.Fatalf("last success %v, want %d", got, testNow.Unix())
	}
	st, _ := x.KeySetStatus()
	if !st.Stale || st.Keys != 1 || !st.FetchedAt.Equal(testNow) || !strings.Contains(st.LastError, "503") {
		t.Fatalf("status %+v", st)
	}
	if pr := st.Problem(); !strings.HasPrefix(pr, "stale: the last fetch of "+p.url()+" failed at ") || !strings.Contains(pr, "the 1 keys fetched at 2030-01-02T03:04:05Z") {
		t.Fatalf("problem %q", pr)
	}

	p.setDown(false)
	p.publish(t, rsaJWK("a", &rsaKeys()[0].PublicKey), rsaJWK("new", &rsaKeys()[1].PublicKey))
	clk.advance(DefaultUnknownKIDInterval)
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 1, "new", goodClaims("beta"))))
	wantID(t, id, err, "beta")
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_stale"); got != 0 {
		t.Fatalf("stale %v after the provider came back", got)
	}
}

// TestJWKSURLDownAtStart: a provider down when the extractor is built does
// not fail it; tokens are refused until a fetch succeeds.
func TestJWKSURLDownAtStart(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	p.setDown(true)
	clk := newTestClock()
	x, reg := urlExtractor(t, p, clk, false, nil)
	tokA := rsaToken(t, 0, "a", goodClaims("acme"))
	id, err := x.Extract(bearerRequest(t, tokA))
	wantKind(t, id, err, KindUnauthenticated)
	st, _ := x.KeySetStatus()
	if !st.Stale || st.Keys != 0 || !st.FetchedAt.IsZero() || !strings.HasPrefix(st.Problem(), "no key set fetched from ") {
		t.Fatalf("status %+v, problem %q", st, st.Problem())
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_last_success_timestamp_seconds"); got != 0 {
		t.Fatalf("last success %v, want 0", got)
	}
	p.setDown(false)
	clk.advance(DefaultUnknownKIDInterval)
	id, err = x.Extract(bearerRequest(t, tokA))
	wantID(t, id, err, "acme")
}

// TestJWKSURLUnknownKIDStorm: 1,000 tokens with made-up kids cause at most
// one fetch per unknown-kid interval, and tokens of known keys verify
// throughout.
func TestJWKSURLUnknownKIDStorm(t *testing.T) {
	ec := ecKeys()["P256"]
	p := newIDP(t, ecJWK("good", &ec.PublicKey))
	clk := newTestClock()
	x, reg := urlExtractor(t, p, clk, true, nil)
	good := mintKid(t, jwt.SigningMethodES256, ec, "good", goodClaims("acme"), nil)
	storm := func() {
		t.Helper()
		var wg sync.WaitGroup
		var wrong atomic.Int64
		for g := range 20 {
			wg.Go(func() {
				for i := range 50 {
					kid := fmt.Sprintf("made-up-%d-%d-%x", g, i, randBytes(t, 8))
					tok := mintKid(t, jwt.SigningMethodES256, ec, kid, goodClaims("acme"), nil)
					if _, err := x.Extract(bearerRequest(t, tok)); err == nil {
						wrong.Add(1)
					}
					if id, err := x.Extract(bearerRequest(t, good)); err != nil || id != "acme" {
						wrong.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if wrong.Load() > 0 {
			t.Fatalf("%d wrong answers in the storm", wrong.Load())
		}
	}
	// Right after the start's fetch: no fetch at all.
	storm()
	if got := p.hits.Load(); got != 1 {
		t.Fatalf("%d fetches after a storm within the interval, want 1 (the start's)", got)
	}
	for round := int64(1); round <= 3; round++ {
		clk.advance(DefaultUnknownKIDInterval)
		storm()
		if got := p.hits.Load(); got != 1+round {
			t.Fatalf("round %d: %d fetches, want %d: one per interval", round, got, 1+round)
		}
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_unknown_kid_fetches_total"); got != 3 {
		t.Fatalf("unknown-kid fetches metric %v, want 3", got)
	}
}

func randBytes(tb testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestJWKSURLIssuerAudience: with issuer and audience set, a token of a
// known key with another (or no) iss or aud is refused with 401.
func TestJWKSURLIssuerAudience(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	x, _ := urlExtractor(t, p, newTestClock(), false, func(c *JWTConfig) {
		c.Issuer = "https://id.example.com/"
		c.Audience = "https://api.example.com"
	})
	claims := func(iss, aud any) jwt.MapClaims {
		c := goodClaims("acme")
		if iss != nil {
			c["iss"] = iss
		}
		if aud != nil {
			c["aud"] = aud
		}
		return c
	}
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 0, "a", claims("https://id.example.com/", []string{"other", "https://api.example.com"}))))
	wantID(t, id, err, "acme")
	for name, c := range map[string]jwt.MapClaims{
		"wrong issuer":   claims("https://evil.example.com/", "https://api.example.com"),
		"no issuer":      claims(nil, "https://api.example.com"),
		"wrong audience": claims("https://id.example.com/", "https://other.example.com"),
		"no audience":    claims("https://id.example.com/", nil),
	} {
		id, err := x.Extract(bearerRequest(t, rsaToken(t, 0, "a", c)))
		e := wantKind(t, id, err, KindUnauthenticated)
		want := "token issuer or audience not accepted"
		if strings.HasPrefix(name, "no ") {
			want = "token lacks a required claim"
		}
		if e.Kind.Status() != http.StatusUnauthorized || e.Reason != want {
			t.Errorf("%s: %d %q, want 401 %q", name, e.Kind.Status(), e.Reason, want)
		}
	}
}

// TestJWKSURLSkipsUnusableKeys: keys for other uses, of another family, too
// weak or with their private part are skipped (and reported); a document
// without one usable key is a failed fetch that keeps the last good set.
func TestJWKSURLSkipsUnusableKeys(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	enc := rsaJWK("enc", &rsaKeys()[1].PublicKey)
	enc["use"] = "enc"
	enc["alg"] = "RSA-OAEP"
	other := rsaJWK("ps", &rsaKeys()[1].PublicKey)
	other["alg"] = "PS256"
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey), enc, other,
		ecJWK("ec", &ecKeys()["P256"].PublicKey), rsaJWK("weak", &weak.PublicKey))
	clk := newTestClock()
	x, _ := urlExtractor(t, p, clk, false, nil)
	st, _ := x.KeySetStatus()
	if st.Stale || st.Keys != 1 || len(st.Skipped) != 4 {
		t.Fatalf("status %+v", st)
	}
	for _, want := range []string{"enc: use is \"enc\"", "ps: alg PS256 is not one of", "ec: kty is \"EC\"", "weak: RSA key has 1024 bits"} {
		if !strings.Contains(strings.Join(st.Skipped, "\n"), want) {
			t.Errorf("skipped %q lacks %q", st.Skipped, want)
		}
	}
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantID(t, id, err, "acme")
	for _, kid := range []string{"enc", "ps", "weak"} {
		clk.advance(DefaultUnknownKIDInterval)
		id, err := x.Extract(bearerRequest(t, rsaToken(t, 1, kid, goodClaims("acme"))))
		wantKind(t, id, err, KindUnauthenticated)
	}

	p.publish(t, enc, ecJWK("ec", &ecKeys()["P256"].PublicKey))
	clk.advance(DefaultUnknownKIDInterval)
	_, _ = x.Extract(bearerRequest(t, rsaToken(t, 1, "fresh", goodClaims("acme"))))
	st, _ = x.KeySetStatus()
	if !st.Stale || st.Keys != 1 || !strings.Contains(st.LastError, "JWKS holds no key usable with [RS256]") {
		t.Fatalf("status after a document without usable keys %+v", st)
	}
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantID(t, id, err, "acme")

	// A document that publishes a private part is refused whole, even a
	// lone RSA "d" (with n, enough to sign).
	leaked := rsaJWK("leaked", &rsaKeys()[1].PublicKey)
	leaked["d"] = b64u(rsaKeys()[1].D.Bytes())
	p.publish(t, rsaJWK("a", &rsaKeys()[0].PublicKey), leaked)
	clk.advance(DefaultUnknownKIDInterval)
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 1, "leaked", goodClaims("acme"))))
	wantKind(t, id, err, KindUnauthenticated)
	if st, _ = x.KeySetStatus(); !st.Stale || !strings.Contains(st.LastError, `JWKS publishes the private part ("d") of key "leaked"`) {
		t.Fatalf("status after a private part %+v", st)
	}

	// A kid listed twice is ambiguous: the document is refused whole.
	p.publish(t, rsaJWK("a", &rsaKeys()[0].PublicKey), rsaJWK("a", &rsaKeys()[1].PublicKey))
	clk.advance(DefaultUnknownKIDInterval)
	_, _ = x.Extract(bearerRequest(t, rsaToken(t, 1, "fresh", goodClaims("acme"))))
	if st, _ = x.KeySetStatus(); !strings.Contains(st.LastError, `JWKS lists kid "a" twice`) {
		t.Fatalf("status after a duplicate kid %+v", st)
	}
}

// TestJWKSURLKeyAlgAndFamily: the checks of a file's set hold for a URL's:
// a key's alg is the only one it verifies, and the token's algorithm must
// be allowed.
func TestJWKSURLKeyAlgAndFamily(t *testing.T) {
	a := rsaJWK("a", &rsaKeys()[0].PublicKey)
	a["alg"] = "RS384"
	p := newIDP(t, a)
	x, _ := urlExtractor(t, p, newTestClock(), false, func(c *JWTConfig) { c.Algorithms = []string{"RS256", "RS384"} })
	id, err := x.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodRS384, rsaKeys()[0], "a", goodClaims("acme"), nil)))
	wantID(t, id, err, "acme")
	id, err = x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantKind(t, id, err, KindUnauthenticated) // RS256 with an RS384 key
	id, err = x.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodPS384, rsaKeys()[0], "a", goodClaims("acme"), nil)))
	wantKind(t, id, err, KindUnauthenticated) // PS384 is not allowed
}

// TestJWKSURLOverHTTPS fetches from a TLS provider with the client given.
func TestJWKSURLOverHTTPS(t *testing.T) {
	p := &idp{hit: make(chan struct{}, 16)}
	p.publish(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	srv := httptest.NewTLSServer(http.HandlerFunc(p.serve))
	defer srv.Close()
	x, err := NewExtractor(Config{Source: SourceJWT, Now: fixedClock, JWT: JWTConfig{
		Algorithms: []string{"RS256"}, KeySetURL: srv.URL + "/jwks", KeySetClient: srv.Client(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.(*extractor).Close()
	id, err := x.Extract(bearerRequest(t, rsaToken(t, 0, "a", goodClaims("acme"))))
	wantID(t, id, err, "acme")
}

// TestJWKSURLDocumentTooLarge: an answer over 1 MiB is a failed fetch.
func TestJWKSURLDocumentTooLarge(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	big := []byte(`{"keys":[` + strings.Repeat(" ", maxJWKSBytes) + `]}`)
	p.mu.Lock()
	p.doc = big
	p.mu.Unlock()
	x, _ := urlExtractor(t, p, newTestClock(), false, nil)
	st, _ := x.KeySetStatus()
	if !st.Stale || !strings.Contains(st.LastError, "JWKS document is larger than 1048576 bytes") {
		t.Fatalf("status %+v", st)
	}
}

// TestJWKSURLConfigErrors: each bad setting is a ConfigError naming it.
func TestJWKSURLConfigErrors(t *testing.T) {
	p := newIDP(t, rsaJWK("a", &rsaKeys()[0].PublicKey))
	for _, tc := range []struct {
		name, field string
		jc          JWTConfig
	}{
		{"hmac", "JWT.KeySetURL", JWTConfig{Algorithms: []string{"HS256"}, KeySetURL: p.url()}},
		{"scheme", "JWT.KeySetURL", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: "ftp://id.example.com/jwks"}},
		{"no host", "JWT.KeySetURL", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: "https:///jwks"}},
		{"credentials", "JWT.KeySetURL", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: "https://u:p@id.example.com/jwks"}},
		{"with key", "JWT.Key", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url(), Key: pemPublic(t, &rsaKeys()[0].PublicKey)}},
		{"none", "JWT.Key", JWTConfig{Algorithms: []string{"RS256"}}},
		{"refresh", "JWT.KeySetRefresh", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url(), KeySetRefresh: -time.Second}},
		{"interval", "JWT.UnknownKIDInterval", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url(), UnknownKIDInterval: -time.Second}},
		{"issuer", "JWT.Issuer", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url(), Issuer: " https://id.example.com/"}},
		{"audience", "JWT.Audience", JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url(), Audience: "api "}},
	} {
		_, err := NewExtractor(Config{Source: SourceJWT, JWT: tc.jc})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: got %v, want a ConfigError for %s", tc.name, err, tc.field)
		}
	}
	// Metrics registered twice in one registry are refused, not a panic.
	reg := prometheus.NewRegistry()
	cfg := Config{Source: SourceJWT, Registerer: reg, JWT: JWTConfig{Algorithms: []string{"RS256"}, KeySetURL: p.url()}}
	x, err := NewExtractor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer x.(*extractor).Close()
	var ce *ConfigError
	if _, err := NewExtractor(cfg); !errors.As(err, &ce) || ce.Field != "Registerer" {
		t.Fatalf("second registration: %v", err)
	}
}

// TestFromSpecJWKSURL: the spec's jwks_url settings, issuer and audience
// reach the extractor's config, and exactly one key setting is required.
func TestFromSpecJWKSURL(t *testing.T) {
	spec := config.Tenancy{Source: "jwt", MaxIDBytes: 64, JWT: config.JWTSource{
		Algorithms: []string{"RS256"}, Claim: "tenant", JWKSURL: "https://id.example.com/.well-known/jwks.json",
		JWKSRefresh: config.Duration(5 * time.Minute), JWKSUnknownKIDInterval: config.Duration(30 * time.Second),
		JWKSTimeout: config.Duration(3 * time.Second), Issuer: "https://id.example.com/", Audience: "api",
	}}
	cfg, err := FromSpec(spec, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.JWT
	if j.KeySetURL != spec.JWT.JWKSURL || j.KeySetRefresh != 5*time.Minute || j.UnknownKIDInterval != 30*time.Second ||
		j.KeySetTimeout != 3*time.Second || j.Issuer != "https://id.example.com/" || j.Audience != "api" || j.Key != nil || j.KeySet != nil {
		t.Fatalf("JWT config %+v", j)
	}
	spec.JWT.KeyEnv = "CELLGATE_JWT_KEY"
	if _, err := FromSpec(spec, func(string) string { return "secret" }); err == nil ||
		err.Error() != "tenancy.jwt: set exactly one of jwks_url, jwks_file, key_file and key_env for source \"jwt\", got 2 (tenancy.jwt.jwks_url, tenancy.jwt.key_env)" {
		t.Fatalf("two key settings: %v", err)
	}
	spec.JWT.KeyEnv, spec.JWT.JWKSURL = "", ""
	if _, err := FromSpec(spec, func(string) string { return "" }); err == nil ||
		err.Error() != "tenancy.jwt: no verification keys for source \"jwt\"; set one of jwks_url (the identity provider's JWKS URL), jwks_file, key_file and key_env" {
		t.Fatalf("no key setting: %v", err)
	}
}
