// Package oidctest is an OpenID Connect provider for tests of the
// consoles' login: an httptest server with discovery, a JWKS of RSA keys
// it can rotate, an authorization endpoint that logs the configured person
// in at once and redirects back with a code, and a token endpoint that
// checks the client, the code, the redirect URL and the PKCE verifier
// before issuing a signed ID token. It can also misbehave on request (a
// foreign state, a wrong nonce) so tests can see the console refuse.
//
// Concurrency: a Provider is safe for concurrent use; its settings are
// guarded by its mutex.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
)

// The client the consoles use at a Provider, and the role values of
// Provider.Config.
const (
	ClientID      = "cellgate-console"
	ClientSecret  = "test-client-secret"
	OperatorGroup = "cellgate-operators"
	ReaderGroup   = "cellgate-readers"
)

// Provider is the in-test OpenID provider.
type Provider struct {
	// URL is the issuer (the server's base URL).
	URL string

	mu     sync.Mutex
	keys   []jose.JSONWebKey // private; [0] signs; all published
	n      int
	codes  map[string]grant
	person map[string]any
	state  string // non-empty: the authorize redirect carries this state
	nonce  string // non-empty: the ID tokens carry this nonce
	jwks   int
}

type grant struct {
	clientID, redirect, nonce, challenge string
	claims                               map[string]any
}

// New starts a Provider, closed at the test's end. Its person is
// "alice" (alice@example.com) in the operators' group.
func New(tb testing.TB) *Provider {
	tb.Helper()
	p := &Provider{codes: map[string]grant{}}
	p.SetPerson(map[string]any{"sub": "alice", "email": "alice@example.com", "groups": []string{"staff", OperatorGroup}})
	p.Rotate()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.keySet)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Config is the consoles' OIDCConfig for this provider: groups map
// OperatorGroup to operators and ReaderGroup to readers.
func (p *Provider) Config() *consoleauth.OIDCConfig {
	return &consoleauth.OIDCConfig{
		Issuer: p.URL, ClientID: ClientID, ClientSecret: ClientSecret, SecretEnv: "TEST_OIDC_SECRET",
		RoleClaim: "groups", OperatorValues: []string{OperatorGroup}, ReadOnlyValues: []string{ReaderGroup},
	}
}

// SetPerson sets the claims of the person the next logins are for (sub,
// email, groups...).
func (p *Provider) SetPerson(claims map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.person = claims
}

// Rotate makes a new signing key and drops the old ones from the JWKS, so
// a verifier that cached them must fetch the key set again.
func (p *Provider) Rotate() {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.keys = []jose.JSONWebKey{{Key: k, KeyID: "key-" + strconv.Itoa(p.n), Algorithm: string(jose.RS256), Use: "sig"}}
}

// ForgeState makes the authorization endpoint redirect back with state
// instead of the one it was given ("" stops it).
func (p *Provider) ForgeState(state string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = state
}

// ForgeNonce makes the ID tokens carry nonce instead of the login's (""
// stops it).
func (p *Provider) ForgeNonce(nonce string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nonce = nonce
}

// JWKSFetches counts the key set's fetches.
func (p *Provider) JWKSFetches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.jwks
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{
		"issuer": p.URL, "authorization_endpoint": p.URL + "/authorize", "token_endpoint": p.URL + "/token",
		"jwks_uri": p.URL + "/jwks", "response_types_supported": []string{"code"},
		"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported": []string{"S256"},
	})
}

func (p *Provider) keySet(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	p.jwks++
	var set jose.JSONWebKeySet
	for _, k := range p.keys {
		set.Keys = append(set.Keys, k.Public())
	}
	p.mu.Unlock()
	writeJSON(w, set)
}

func random() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// authorize logs the person in at once: no form, a code straight back.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("client_id") != ClientID || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" {
		http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || back.Host == "" {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	code := random()
	p.mu.Lock()
	claims := map[string]any{}
	for k, v := range p.person {
		claims[k] = v
	}
	p.codes[code] = grant{clientID: ClientID, redirect: back.String(), nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), claims: claims}
	state := q.Get("state")
	if p.state != "" {
		state = p.state
	}
	p.mu.Unlock()
	v := back.Query()
	v.Set("code", code)
	v.Set("state", state)
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token trades a code for an ID token, once, for the right client,
// redirect URL and PKCE verifier.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	if id != ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(ClientSecret)) != 1 {
		w.WriteHeader(http.StatusUnauthorized)
		writeJSON(w, map[string]string{"error": "invalid_client"})
		return
	}
	p.mu.Lock()
	g, found := p.codes[r.PostFormValue("code")]
	delete(p.codes, r.PostFormValue("code"))
	key := p.keys[0]
	nonce := g.nonce
	if p.nonce != "" {
		nonce = p.nonce
	}
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	if !found || r.PostFormValue("grant_type") != "authorization_code" || r.PostFormValue("redirect_uri") != g.redirect ||
		base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]string{"error": "invalid_grant"})
		return
	}
	now := time.Now()
	claims := map[string]any{"iss": p.URL, "aud": ClientID, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "nonce": nonce}
	for k, v := range g.claims {
		claims[k] = v
	}
	payload, _ := json.Marshal(claims)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	raw, _ := jws.CompactSerialize()
	writeJSON(w, map[string]any{"access_token": random(), "token_type": "Bearer", "expires_in": 300, "id_token": raw})
}

// Browser returns a client that keeps cookies and follows redirects, as a
// browser through the provider's login would.
func Browser(tb testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &http.Client{Jar: jar}
}
