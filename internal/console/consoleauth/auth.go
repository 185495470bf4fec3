// Package consoleauth is what the cells' console (internal/console) and the
// router's console (internal/routerconsole) share to guard their pages: the
// token roles, signed session cookies, CSRF tokens, the security headers
// of every page and the audit line. It knows net/http only, so the router,
// which links no Echo, can use it.
//
// Tokens are hashed before a constant-time compare, so neither their
// content nor their length leaks through timing. A session cookie is
// role|expiry|HMAC(key, role|expiry|hash of the role's token): it dies with
// its expiry, with the process's key and with a change of the token it was
// traded for. A CSRF token is an HMAC of the session cookie, so only a page
// served to the cookie's holder can know it; a bearer token needs none (a
// browser never sends one on its own).
//
// Concurrency: an Authenticator is immutable after New and safe for
// concurrent use.
package consoleauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/http"
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
// CSRF token of every action a session sends.
const (
	CSRFField  = "csrf"
	CSRFHeader = "X-CSRF-Token"
)

// AuditMessage is the message of every audit line (login, logout, actions),
// so one search finds the actions of both consoles.
const AuditMessage = "console audit"

// Config is what an Authenticator checks against.
type Config struct {
	// AdminToken is the read-only token (required by the consoles).
	AdminToken string
	// OperatorToken may also act; "" means nobody may.
	OperatorToken string
	// Key signs session cookies and CSRF tokens.
	Key []byte
	// TTL is how long a session lasts.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Cookie is the session cookie's name. Each console has its own: a
	// browser keeps cookies per host, not per port, so a router and a cell
	// on one host would otherwise overwrite each other's session.
	Cookie string
	// Path scopes the cookie ("/admin").
	Path string
}

// Authenticator turns a bearer token or a session cookie into a Role.
type Authenticator struct {
	admin, operator [sha256.Size]byte
	hasOperator     bool
	key             []byte
	ttl             time.Duration
	now             func() time.Time
	cookie, path    string
}

// New builds an Authenticator.
func New(c Config) Authenticator {
	if c.Now == nil {
		c.Now = time.Now
	}
	return Authenticator{
		admin:       sha256.Sum256([]byte(c.AdminToken)),
		operator:    sha256.Sum256([]byte(c.OperatorToken)),
		hasOperator: c.OperatorToken != "",
		key:         c.Key,
		ttl:         c.TTL,
		now:         c.Now,
		cookie:      c.Cookie,
		path:        c.Path,
	}
}

// RandomKey returns 32 random bytes: a session key that ends every session
// when the process restarts.
func RandomKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("console: session key: %w", err)
	}
	return k, nil
}

// Token returns the role of a token; both compares always run.
func (a Authenticator) Token(tok string) Role {
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

func (a Authenticator) tokenHash(r Role) []byte {
	if r == RoleOperator {
		return a.operator[:]
	}
	return a.admin[:]
}

func (a Authenticator) mac(payload []byte, r Role) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write(payload)
	m.Write(a.tokenHash(r))
	return m.Sum(nil)
}

// Session returns a cookie value for r, valid for the TTL.
func (a Authenticator) Session(r Role) string {
	payload := make([]byte, 9, 9+sha256.Size)
	payload[0] = byte(r)
	binary.BigEndian.PutUint64(payload[1:], uint64(a.now().Add(a.ttl).Unix()))
	return base64.RawURLEncoding.EncodeToString(append(payload, a.mac(payload, r)...))
}

// Cookie returns the role of a session cookie value.
func (a Authenticator) Cookie(v string) Role {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) != 9+sha256.Size {
		return RoleNone
	}
	r := Role(raw[0])
	if r != RoleReader && (r != RoleOperator || !a.hasOperator) {
		return RoleNone
	}
	if !hmac.Equal(raw[9:], a.mac(raw[:9], r)) {
		return RoleNone
	}
	if a.now().Unix() >= int64(binary.BigEndian.Uint64(raw[1:9])) {
		return RoleNone
	}
	return r
}

// CSRF is the CSRF token of a session.
func (a Authenticator) CSRF(session string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("csrf\x00"))
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Who is a request's credential.
type Who struct {
	Role Role
	// Session is the cookie value when the role came from the cookie (""
	// for a bearer token, which needs no CSRF token).
	Session string
}

// Identify reads the bearer token, else the session cookie. A malformed
// Authorization header is nobody, even with a good cookie beside it.
func (a Authenticator) Identify(r *http.Request) Who {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return Who{}
		}
		return Who{Role: a.Token(tok)}
	}
	if ck, err := r.Cookie(a.cookie); err == nil {
		if role := a.Cookie(ck.Value); role != RoleNone {
			return Who{Role: role, Session: ck.Value}
		}
	}
	return Who{}
}

// CSRFOK checks an action's CSRF token (header, else form field); bearer
// requests need none.
func (a Authenticator) CSRFOK(r *http.Request, w Who) bool {
	if w.Session == "" {
		return true
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.FormValue(CSRFField)
	}
	want := a.CSRF(w.Session)
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// SessionCookie builds the cookie a login sets (value "" clears it):
// HttpOnly, SameSite=Strict, Secure when the request came over TLS (a
// forwarded-proto header from any peer changes nothing), scoped to the
// console's path, living ttl.
func (a Authenticator) SessionCookie(r *http.Request, value string, ttl time.Duration) *http.Cookie {
	ck := &http.Cookie{
		Name:     a.cookie,
		Value:    value,
		Path:     a.path,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil,
		MaxAge:   int(ttl / time.Second),
	}
	if value == "" {
		ck.MaxAge = -1
	}
	return ck
}

// SetPageHeaders sets what every console page answers with: a content
// security policy that allows the console's own styles and images only
// (no script, no frame, forms only to itself), no MIME sniffing, no
// caching.
func SetPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

// Audit writes one audit line: who (role), what (action), how it ended,
// and any further key/value pairs.
func Audit(log *slog.Logger, level slog.Level, role Role, action, outcome string, kv ...any) {
	args := append([]any{"role", role.String(), "action", action, "outcome", outcome}, kv...)
	log.Log(context.Background(), level, AuditMessage, args...)
}
