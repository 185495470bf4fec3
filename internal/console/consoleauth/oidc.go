package consoleauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/cellgate/cellgate/internal/config"
)

// OIDCConfig lets operators log in as themselves through an OpenID
// Connect provider (Keycloak, Okta, Entra, Auth0, Dex...): the
// authorization-code flow with PKCE, state and nonce, and a claim of the
// ID token that maps a person to a role. The field names of errors are
// the spec's (console.oidc.*).
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is read
	// at the first login (and again after a failure), so a provider that
	// is down at boot does not stop the console.
	Issuer string
	// ClientID and ClientSecret are the console's client at the provider.
	ClientID, ClientSecret string
	// SecretEnv names the variable ClientSecret came from, for errors.
	SecretEnv string
	// RedirectURL is the callback registered at the provider; "" derives
	// it from each request: its scheme (TLS directly or through a trusted
	// proxy), its Host and the console's path + "/oidc/callback".
	RedirectURL string
	// Scopes are asked for besides openid and email (e.g. "groups" for
	// Okta, "profile").
	Scopes []string
	// RoleClaim is the ID token's claim that names the person's groups or
	// roles: a string or a list of strings.
	RoleClaim string
	// OperatorValues map a person to the operator role (any one of them
	// in the claim); ReadOnlyValues to the read-only role. A person with
	// neither is refused (403).
	OperatorValues, ReadOnlyValues []string
	// Client makes the calls to the provider; nil means a client with a
	// 10 s timeout.
	Client *http.Client
}

// Check names the first field of c that cannot work.
func (c OIDCConfig) Check() error {
	u, err := url.Parse(c.Issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("console.oidc.issuer: %q is not an http(s) URL without query or fragment", c.Issuer)
	}
	if c.ClientID == "" {
		return errors.New("console.oidc.client_id: empty; it is the console's client id at the provider")
	}
	if c.ClientSecret == "" {
		return fmt.Errorf("console.oidc.client_secret_env: the variable %q is empty or unset; it must hold the client secret", c.SecretEnv)
	}
	if c.RedirectURL != "" {
		u, err := url.Parse(c.RedirectURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("console.oidc.redirect_url: %q is not an http(s) URL", c.RedirectURL)
		}
	}
	if c.RoleClaim == "" {
		return errors.New("console.oidc.role_claim: empty; it names the claim that maps a person to a role")
	}
	if len(c.OperatorValues) == 0 && len(c.ReadOnlyValues) == 0 {
		return errors.New("console.oidc.operator_values and read_only_values: both empty, so nobody could log in")
	}
	return nil
}

// oidcLogin is an Authenticator's OpenID Connect side.
type oidcLogin struct {
	cfg OIDCConfig
	// fp is the fingerprint its sessions carry: of the issuer, the client
	// and the role mapping, so changing any of them ends those sessions.
	fp string

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
}

func newOIDCLogin(c OIDCConfig) (*oidcLogin, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	h := sha256.New()
	for _, s := range [][]string{{c.Issuer, c.ClientID, c.RoleClaim}, c.OperatorValues, c.ReadOnlyValues} {
		h.Write([]byte(strings.Join(s, "\x00") + "\x01"))
	}
	return &oidcLogin{cfg: c, fp: "oidc:" + hex.EncodeToString(h.Sum(nil)[:16])}, nil
}

// discover reads the provider's discovery document once it answers. The
// key set it builds fetches the provider's JWKS again for a key id it does
// not know, so the provider's key rotations need no restart.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, o.verifier, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.cfg.Client), o.cfg.Issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: console.oidc.issuer %s: %v", ErrProvider, o.cfg.Issuer, err)
	}
	o.provider = p
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID})
	return o.provider, o.verifier, nil
}

// ErrProvider is an OpenID provider that cannot be reached or read: the
// console answers 503.
var ErrProvider = errors.New("OpenID provider unavailable")

// OIDCEnabled reports whether the console offers OpenID Connect login.
func (a *Authenticator) OIDCEnabled() bool { return a.oidc != nil }

// oauth builds the client config for r (the redirect URL may come from r).
func (a *Authenticator) oauth(r *http.Request, p *oidc.Provider) *oauth2.Config {
	redirect := a.oidc.cfg.RedirectURL
	if redirect == "" {
		_, tls := a.cfg.Network.Client(r)
		scheme := "http"
		if tls {
			scheme = "https"
		}
		redirect = scheme + "://" + r.Host + a.cfg.Path + "/oidc/callback"
	}
	return &oauth2.Config{
		ClientID: a.oidc.cfg.ClientID, ClientSecret: a.oidc.cfg.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: redirect,
		Scopes: append([]string{oidc.ScopeOpenID, "email"}, a.oidc.cfg.Scopes...),
	}
}

// stateCookie is the cookie that carries a login's state, nonce and PKCE
// verifier from its start to its callback. It is SameSite=Lax, not
// Strict: the callback is a navigation from the provider's site, and a
// Strict cookie would not come with it.
func (a *Authenticator) stateCookie(r *http.Request, value string) *http.Cookie {
	_, tls := a.cfg.Network.Client(r)
	ck := &http.Cookie{
		Name: a.cfg.Cookie + "_oidc", Value: value, Path: a.cfg.Path,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: tls || a.cfg.SecureCookies,
		MaxAge: int(oidcLoginTime / time.Second),
	}
	if value == "" {
		ck.MaxAge = -1
	}
	return ck
}

// oidcLoginTime bounds a login at the provider, from start to callback.
const oidcLoginTime = 10 * time.Minute

// OIDCStart begins a login at the provider: it returns the cookie that
// holds the login's fresh state, nonce and PKCE verifier, and the
// provider's authorization URL to redirect the browser to. A provider
// that cannot be read is ErrProvider.
func (a *Authenticator) OIDCStart(r *http.Request) (*http.Cookie, string, error) {
	p, _, err := a.oidc.discover(r.Context())
	if err != nil {
		a.cfg.Logger.Error("console oidc", "console", a.cfg.Console, "error", err.Error())
		return nil, "", err
	}
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	to := a.oauth(r, p).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
	return a.stateCookie(r, state+"."+nonce+"."+verifier), to, nil
}

// OIDCCallback finishes a login: the state must match the login's cookie,
// the code is traded (with the PKCE verifier) for an ID token whose
// signature, issuer, audience, expiry and nonce are checked, and the role
// claim must map the person to a role. It returns the person, the
// session cookie's value, and the cookie that clears the login's state
// (to set whatever the outcome). A refusal is audited and counted: 400
// (state, a provider's error), 401 (token or nonce), 403 (no role). These
// logins are not throttled: the provider guards its own password form.
func (a *Authenticator) OIDCCallback(r *http.Request) (Who, string, *http.Cookie, *Refusal, error) {
	remote, _ := a.cfg.Network.Client(r)
	w := Who{Remote: remote}
	clear := a.stateCookie(r, "")
	refuse := func(status int, reason string, kv ...any) (Who, string, *http.Cookie, *Refusal, error) {
		a.cfg.Metrics.refused(a.cfg.Console, "oidc", reason)
		Audit(a.cfg.Logger, slog.LevelWarn, w, "login", "refused: "+reason, append([]any{"console", a.cfg.Console, "method", "oidc"}, kv...)...)
		return w, "", clear, &Refusal{Status: status, Reason: reason}, nil
	}
	var state, nonce, verifier string
	if ck, err := r.Cookie(a.cfg.Cookie + "_oidc"); err == nil {
		parts := strings.Split(ck.Value, ".")
		if len(parts) == 3 {
			state, nonce, verifier = parts[0], parts[1], parts[2]
		}
	}
	q := r.URL.Query()
	if state == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
		return refuse(http.StatusBadRequest, "oidc_state")
	}
	if e := q.Get("error"); e != "" {
		return refuse(http.StatusBadRequest, "oidc_provider_error", "provider_error", e)
	}
	p, verify, err := a.oidc.discover(r.Context())
	if err != nil {
		a.cfg.Logger.Error("console oidc", "console", a.cfg.Console, "error", err.Error())
		return w, "", clear, nil, err
	}
	tok, err := a.oauth(r, p).Exchange(oidc.ClientContext(r.Context(), a.oidc.cfg.Client), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return refuse(http.StatusUnauthorized, "oidc_code", "error", err.Error())
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return refuse(http.StatusUnauthorized, "oidc_token", "error", "no id_token in the token response")
	}
	id, err := verify.Verify(oidc.ClientContext(r.Context(), a.oidc.cfg.Client), raw)
	if err != nil {
		return refuse(http.StatusUnauthorized, "oidc_token", "error", err.Error())
	}
	var claims map[string]any
	if err := id.Claims(&claims); err != nil {
		return refuse(http.StatusUnauthorized, "oidc_token", "error", err.Error())
	}
	w.Subject = id.Subject
	w.Email, _ = claims["email"].(string)
	if subtle.ConstantTimeCompare([]byte(id.Nonce), []byte(nonce)) != 1 {
		return refuse(http.StatusUnauthorized, "oidc_nonce")
	}
	role := a.oidc.role(claims[a.oidc.cfg.RoleClaim])
	if role == RoleNone {
		return refuse(http.StatusForbidden, "oidc_no_role", "claim", a.oidc.cfg.RoleClaim)
	}
	cookie, csrf := randomString(), randomString()
	now := a.cfg.Now()
	sid := sessionID(cookie)
	s := Session{Role: role, CSRF: csrf, Token: a.oidc.fp, Subject: w.Subject, Email: w.Email, Created: now, Seen: now, Expires: now.Add(a.cfg.TTL)}
	if err := a.cfg.Store.Put(r.Context(), sid, s); err != nil {
		return w, "", clear, nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	w.Role, w.Session, w.CSRF = role, sid, csrf
	Audit(a.cfg.Logger, slog.LevelInfo, w, "login", "ok", "console", a.cfg.Console, "method", "oidc")
	return w, cookie, clear, nil, nil
}

// role maps a claim's value (a string or a list of strings) to a role:
// operator if any value is an operator value, else read-only if any is a
// read-only value.
func (o *oidcLogin) role(claim any) Role {
	var vals []string
	switch v := claim.(type) {
	case string:
		vals = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				vals = append(vals, s)
			}
		}
	}
	role := RoleNone
	for _, v := range vals {
		if slices.Contains(o.cfg.OperatorValues, v) {
			return RoleOperator
		}
		if slices.Contains(o.cfg.ReadOnlyValues, v) {
			role = RoleReader
		}
	}
	return role
}

// WriteContinue answers a finished OpenID login with a page that moves on
// to target. A redirect would not do: the browser counts a redirect that
// began at the provider's site as cross-site and would not send the
// SameSite=Strict session cookie just set; a page's refresh is a
// navigation of the console's own.
func WriteContinue(w http.ResponseWriter, target string) {
	SetPageHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	t := strings.NewReplacer(`&`, "&amp;", `"`, "&quot;", `<`, "&lt;", `>`, "&gt;").Replace(target)
	fmt.Fprintf(w, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url=%s\"><title>Logged in</title></head><body><p>Logged in. <a href=\"%s\">Continue to the console</a>.</p></body></html>\n", t, t)
}

// OIDCFromSpec builds the OpenID login of the spec's console.oidc block,
// reading the client secret through getenv (os.Getenv); nil when the
// block has no issuer. An error names the field that cannot work, an
// empty secret variable included, so a console never boots with a login
// that would fail at its first use.
func OIDCFromSpec(c config.ConsoleOIDC, getenv func(string) string) (*OIDCConfig, error) {
	if c.Issuer == "" {
		return nil, nil
	}
	o := &OIDCConfig{
		Issuer: c.Issuer, ClientID: c.ClientID, SecretEnv: c.ClientSecretEnv, RedirectURL: c.RedirectURL,
		Scopes: c.Scopes, RoleClaim: c.RoleClaim, OperatorValues: c.OperatorValues, ReadOnlyValues: c.ReadOnlyValues,
	}
	if c.ClientSecretEnv != "" {
		o.ClientSecret = getenv(c.ClientSecretEnv)
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	return o, nil
}
