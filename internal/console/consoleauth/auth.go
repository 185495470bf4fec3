// Package consoleauth is what the cells' console (internal/console) and the
// router's console (internal/routerconsole) share to guard their pages: the
// token roles, server-side sessions, CSRF tokens, the throttling of failed
// logins and bearer tokens, the client address behind trusted proxies, the
// security headers of every answer and the audit line. It knows net/http
// only, so the router, which links no Echo, can use it.
//
// Tokens are hashed before a constant-time compare, so neither their
// content nor their length leaks through timing. A login creates a session
// in a Store: the cookie holds 32 random bytes and the store keeps only
// their SHA-256 (the session's id), the role, a CSRF secret drawn for this
// session alone, a fingerprint of the token it was traded for and its
// times. A session ends at logout (the store forgets it, so a saved cookie
// is worth nothing), when it has been idle for the idle timeout, at its
// expiry, and when its role's token changes. The cells keep their
// sessions in the control database (every process of a cell sees a logout
// at once); the router keeps them in its own memory (MemoryStore).
//
// Concurrency: an Authenticator is safe for concurrent use; its limiter and
// its store guard their own state, everything else is fixed after New.
package consoleauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Role is what a token may do.
type Role uint8

// The roles. The zero Role is nobody.
const (
	RoleNone Role = iota
	// RoleReader holds the admin token: it sees everything, changes nothing.
	RoleReader
	// RoleOperator holds the operator token: it may also act (the cells'
	// console: retry, cancel, delete, pause).
	RoleOperator
)

func (r Role) String() string {
	switch r {
	case RoleReader:
		return "read-only"
	case RoleOperator:
		return "operator"
	}
	return "none"
}

// CanAct reports whether the role may change things.
func (r Role) CanAct() bool { return r == RoleOperator }

// CSRFField is the form field, and CSRFHeader the header, that carry the
// CSRF token of every action a session sends. Only a POST body or the
// header is read: a value in the query string is ignored, so it never sits
// in a log or a Referer.
const (
	CSRFField  = "csrf"
	CSRFHeader = "X-CSRF-Token"
)

// AuditMessage is the message of every audit line (login, logout, actions),
// so one search finds the actions of both consoles.
const AuditMessage = "console audit"

// MinTokenLength is the shortest token a console accepts, in bytes: 32
// random bytes (or their hex or base64 form) cannot be guessed, throttled
// or not.
const MinTokenLength = 32

// CheckToken says whether tok may guard a console; env names the variable
// that holds it, for the error.
func CheckToken(env, tok string) error {
	if len(tok) < MinTokenLength {
		return fmt.Errorf("%s: the console token is %d bytes; it must be at least %d (for example: openssl rand -hex 32)", env, len(tok), MinTokenLength)
	}
	return nil
}

// Config is what an Authenticator checks against.
type Config struct {
	// AdminToken is the read-only token (required by the consoles).
	AdminToken string
	// OperatorToken may also act; "" means nobody may.
	OperatorToken string
	// Store keeps the sessions (required).
	Store Store
	// TTL is the longest a session lasts from its login.
	TTL time.Duration
	// Idle ends a session that has not been used for this long.
	Idle time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Cookie is the session cookie's name. Each console has its own: a
	// browser keeps cookies per host, not per port, so a router and a cell
	// on one host would otherwise overwrite each other's session.
	Cookie string
	// Path scopes the cookie ("/admin").
	Path string
	// Network says where a request comes from and whether it came over
	// TLS (trusted proxies); its zero value trusts no proxy.
	Network Network
	// SecureCookies marks the cookie Secure on every answer, whatever the
	// request came over.
	SecureCookies bool
	// Limiter throttles failed logins and bad bearer tokens; nil means a
	// NewLimiter(LimiterConfig{Now: Now}).
	Limiter *Limiter
	// Metrics counts the refusals; nil counts nowhere.
	Metrics *Metrics
	// Console names the console in audit lines and metrics ("cell",
	// "router").
	Console string
	// Logger receives the audit lines of refusals; nil means slog.Default().
	Logger *slog.Logger
	// OIDC, when set, lets operators log in as themselves through an
	// OpenID Connect provider (OIDCStart, OIDCCallback).
	OIDC *OIDCConfig
}

// Authenticator turns a bearer token or a session cookie into a Who.
type Authenticator struct {
	admin, operator [sha256.Size]byte
	hasOperator     bool
	cfg             Config
	oidc            *oidcLogin
}

// New builds an Authenticator.
func New(c Config) (*Authenticator, error) {
	if c.Store == nil {
		return nil, errors.New("consoleauth: Config.Store is nil")
	}
	if c.TTL <= 0 || c.Idle <= 0 {
		return nil, fmt.Errorf("consoleauth: TTL (%s) and Idle (%s) must be positive", c.TTL, c.Idle)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Limiter == nil {
		c.Limiter = NewLimiter(LimiterConfig{Now: c.Now})
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	a := &Authenticator{
		admin:       sha256.Sum256([]byte(c.AdminToken)),
		operator:    sha256.Sum256([]byte(c.OperatorToken)),
		hasOperator: c.OperatorToken != "",
		cfg:         c,
	}
	if c.OIDC != nil {
		o, err := newOIDCLogin(*c.OIDC)
		if err != nil {
			return nil, err
		}
		a.oidc = o
	}
	return a, nil
}

// Token returns the role of a token; both compares always run.
func (a *Authenticator) Token(tok string) Role {
	sum := sha256.Sum256([]byte(tok))
	isAdmin := subtle.ConstantTimeCompare(sum[:], a.admin[:])
	isOperator := subtle.ConstantTimeCompare(sum[:], a.operator[:])
	switch {
	case tok == "":
		return RoleNone
	case isOperator == 1 && a.hasOperator:
		return RoleOperator
	case isAdmin == 1:
		return RoleReader
	}
	return RoleNone
}

// fingerprint names the token a role holds now, for a session to remember:
// a session whose fingerprint differs was traded for a token since changed.
// It is a hash of the token's hash, so the store never holds a value that
// opens the console.
func (a *Authenticator) fingerprint(r Role) string {
	h := a.admin
	if r == RoleOperator {
		h = a.operator
	}
	sum := sha256.Sum256(append([]byte("cellgate console session\x00"), h[:]...))
	return hex.EncodeToString(sum[:16])
}

// Who is a request's credential.
type Who struct {
	Role Role
	// Session is the session's id (the SHA-256 of its cookie) when the role
	// came from the cookie; "" for a bearer token, which needs no CSRF
	// token.
	Session string
	// CSRF is the session's CSRF secret.
	CSRF string
	// Remote is the client's address (trusted proxies only).
	Remote string
	// Subject and Email name the person of an OpenID Connect login (the
	// ID token's sub and email claims); "" for a token.
	Subject, Email string
}

// Actor names the credential in audit lines: "oidc:<subject>" for a
// person who logged in through the OpenID provider (a refused one
// included, once the provider named them), "admin-token" and
// "operator-token" for the shared tokens of automation, "session:<first
// 12 hex digits of its id>" for a token login, so one session's lines can
// be followed from its login to its logout.
func (w Who) Actor() string {
	switch {
	case w.Subject != "":
		return "oidc:" + w.Subject
	case w.Role == RoleNone:
		return "none"
	case w.Session != "":
		return "session:" + w.Session[:12]
	case w.Role == RoleOperator:
		return "operator-token"
	}
	return "admin-token"
}

// Refusal is why Identify or Login refused a request before looking at its
// credential, or that the credential was wrong.
type Refusal struct {
	// Status is 401 (wrong or missing credential) or 429 (throttled).
	Status int
	// RetryAfter is how long a throttled source must wait.
	RetryAfter time.Duration
	// Reason is "wrong_token", "backoff" or "global".
	Reason string
}

// SetRetryAfter sets Retry-After for a 429.
func (f Refusal) SetRetryAfter(h http.Header) {
	if f.Status == http.StatusTooManyRequests {
		h.Set("Retry-After", strconv.Itoa(int(max(time.Second, f.RetryAfter.Round(time.Second))/time.Second)))
	}
}

// ErrStore wraps a Store's failure (the control database down): the
// console answers 503, never "logged out".
var ErrStore = errors.New("console sessions unavailable")

// Identify reads the bearer token, else the session cookie. A malformed
// Authorization header is nobody, even with a good cookie beside it. A
// bearer token from a source in backoff is refused (429) before it is
// compared; a wrong one is throttled, audited and counted. A store that
// fails is ErrStore.
func (a *Authenticator) Identify(r *http.Request) (Who, *Refusal, error) {
	remote, _ := a.cfg.Network.Client(r)
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return Who{Remote: remote}, &Refusal{Status: http.StatusUnauthorized, Reason: "wrong_token"}, nil
		}
		if ref := a.throttled(remote, "bearer"); ref != nil {
			return Who{Remote: remote}, ref, nil
		}
		role := a.Token(tok)
		if role == RoleNone {
			return Who{Remote: remote}, a.failed(remote, "bearer"), nil
		}
		a.cfg.Limiter.Succeed(remote)
		return Who{Role: role, Remote: remote}, nil, nil
	}
	ck, err := r.Cookie(a.cfg.Cookie)
	if err != nil || ck.Value == "" {
		return Who{Remote: remote}, &Refusal{Status: http.StatusUnauthorized}, nil
	}
	w, err := a.session(r.Context(), ck.Value)
	w.Remote = remote
	if err != nil {
		return w, nil, err
	}
	if w.Role == RoleNone {
		return w, &Refusal{Status: http.StatusUnauthorized}, nil
	}
	return w, nil, nil
}

// sessionID is the store's key of a cookie value.
func sessionID(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

func (a *Authenticator) session(ctx context.Context, cookie string) (Who, error) {
	if len(cookie) > 64 {
		return Who{}, nil
	}
	id := sessionID(cookie)
	s, ok, err := a.cfg.Store.Get(ctx, id)
	if err != nil {
		return Who{}, fmt.Errorf("%w: %v", ErrStore, err)
	}
	if !ok {
		return Who{}, nil
	}
	now := a.cfg.Now()
	var alive bool
	if s.Subject != "" {
		// A person's session: ends when OIDC is turned off or its issuer,
		// client or role mapping changes.
		alive = a.oidc != nil && (s.Role == RoleReader || s.Role == RoleOperator) &&
			subtle.ConstantTimeCompare([]byte(s.Token), []byte(a.oidc.fp)) == 1
	} else {
		alive = (s.Role == RoleReader || (s.Role == RoleOperator && a.hasOperator)) &&
			subtle.ConstantTimeCompare([]byte(s.Token), []byte(a.fingerprint(s.Role))) == 1
	}
	alive = alive && now.Before(s.Expires) && now.Sub(s.Seen) < a.cfg.Idle
	if !alive {
		// Ended by time or by a token change: gone for every process.
		if err := a.cfg.Store.Delete(ctx, id); err != nil {
			return Who{}, fmt.Errorf("%w: %v", ErrStore, err)
		}
		return Who{}, nil
	}
	// The last use is written at most every Idle/16 (a minute for a
	// quarter hour), not on every request.
	if now.Sub(s.Seen) >= a.cfg.Idle/16 {
		if err := a.cfg.Store.Touch(ctx, id, now); err != nil {
			return Who{}, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	return Who{Role: s.Role, Session: id, CSRF: s.CSRF, Subject: s.Subject, Email: s.Email}, nil
}

// Login checks a token sent by the login form (the POST body only: a token
// in the query string is not read). A source in backoff is refused (429)
// before the token is compared; a wrong token is throttled, audited and
// counted. A right one starts a fresh session with its own CSRF secret and
// returns the cookie value to set.
func (a *Authenticator) Login(r *http.Request) (Who, string, *Refusal, error) {
	remote, _ := a.cfg.Network.Client(r)
	w := Who{Remote: remote}
	if ref := a.throttled(remote, "login"); ref != nil {
		return w, "", ref, nil
	}
	role := a.Token(r.PostFormValue("token"))
	if role == RoleNone {
		return w, "", a.failed(remote, "login"), nil
	}
	a.cfg.Limiter.Succeed(remote)
	cookie, csrf := randomString(), randomString()
	now := a.cfg.Now()
	id := sessionID(cookie)
	s := Session{Role: role, CSRF: csrf, Token: a.fingerprint(role), Created: now, Seen: now, Expires: now.Add(a.cfg.TTL)}
	if err := a.cfg.Store.Put(r.Context(), id, s); err != nil {
		return w, "", nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	w.Role, w.Session, w.CSRF = role, id, csrf
	Audit(a.cfg.Logger, slog.LevelInfo, w, "login", "ok", "console", a.cfg.Console)
	return w, cookie, nil, nil
}

// Logout ends w's session in the store (for every process that shares
// it) and audits it.
func (a *Authenticator) Logout(ctx context.Context, w Who) error {
	if w.Session != "" {
		if err := a.cfg.Store.Delete(ctx, w.Session); err != nil {
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	Audit(a.cfg.Logger, slog.LevelInfo, w, "logout", "ok", "console", a.cfg.Console)
	return nil
}

// throttled refuses a source in backoff, or any source with failures while
// the global limit is spent; the refusal is audited and counted.
func (a *Authenticator) throttled(remote, kind string) *Refusal {
	wait, reason := a.cfg.Limiter.Allow(remote)
	if reason == "" {
		return nil
	}
	a.cfg.Metrics.refused(a.cfg.Console, kind, reason)
	Audit(a.cfg.Logger, slog.LevelWarn, Who{Remote: remote}, kind, "refused: "+reason, "console", a.cfg.Console, "retry_after", wait.Round(time.Second).String())
	return &Refusal{Status: http.StatusTooManyRequests, RetryAfter: wait, Reason: reason}
}

// failed records a wrong token: audited, counted, and the source's backoff
// grows.
func (a *Authenticator) failed(remote, kind string) *Refusal {
	wait := a.cfg.Limiter.Fail(remote)
	a.cfg.Metrics.refused(a.cfg.Console, kind, "wrong_token")
	Audit(a.cfg.Logger, slog.LevelWarn, Who{Remote: remote}, kind, "wrong token", "console", a.cfg.Console, "backoff", wait.Round(time.Second).String())
	return &Refusal{Status: http.StatusUnauthorized, RetryAfter: wait, Reason: "wrong_token"}
}

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// CSRFOK checks an action's CSRF token (header, else the POST body's
// field; never the query string) against the session's secret; bearer
// requests need none.
func (a *Authenticator) CSRFOK(r *http.Request, w Who) bool {
	if w.Session == "" {
		return true
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.PostFormValue(CSRFField)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(w.CSRF)) == 1
}

// SessionCookie builds the cookie a login sets (value "" clears it):
// HttpOnly, SameSite=Strict, scoped to the console's path, living the TTL,
// and Secure when the request came over TLS, directly or through a trusted
// proxy that says so (X-Forwarded-Proto: https), or always when
// Config.SecureCookies is set.
func (a *Authenticator) SessionCookie(r *http.Request, value string) *http.Cookie {
	_, tls := a.cfg.Network.Client(r)
	ck := &http.Cookie{
		Name:     a.cfg.Cookie,
		Value:    value,
		Path:     a.cfg.Path,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   tls || a.cfg.SecureCookies,
		MaxAge:   int(a.cfg.TTL / time.Second),
	}
	if value == "" {
		ck.MaxAge = -1
	}
	return ck
}

// SetHeaders sets what every console answer carries, pages and JSON alike:
// never cached, never sniffed, never named in a Referer.
func SetHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

// SetPageHeaders sets SetHeaders and a content security policy that
// allows the console's own styles and images only (no script, no frame,
// forms only to itself).
func SetPageHeaders(h http.Header) {
	SetHeaders(h)
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'")
}

// Audit writes one audit line: who (role, actor, remote address, and the
// email and session of a person), what (action), how it ended, and any
// further key/value pairs.
func Audit(log *slog.Logger, level slog.Level, w Who, action, outcome string, kv ...any) {
	args := []any{"role", w.Role.String(), "actor", w.Actor(), "remote", w.Remote}
	if w.Subject != "" {
		args = append(args, "email", w.Email)
		if w.Session != "" {
			args = append(args, "session", w.Session[:12])
		}
	}
	args = append(append(args, "action", action, "outcome", outcome), kv...)
	log.Log(context.Background(), level, AuditMessage, args...)
}
