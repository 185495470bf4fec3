package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Role is what a token may do.
type Role uint8

// The roles. The zero Role is nobody.
const (
	RoleNone Role = iota
	// RoleReader holds the admin token: it sees everything, changes nothing.
	RoleReader
	// RoleOperator holds the operator token: it also retries, cancels and
	// deletes jobs.
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

// CanAct reports whether the role may change jobs.
func (r Role) CanAct() bool { return r == RoleOperator }

// SessionCookie is the console's session cookie; CSRFField the form field
// that carries the CSRF token of every action.
const (
	SessionCookie = "cellgate_console"
	CSRFField     = "csrf"
)

// authenticator turns a bearer token or a session cookie into a Role.
// Tokens are hashed before the constant-time compare, so neither their
// content nor their length leaks through timing. A session cookie is
// role|expiry|HMAC(key, role|expiry|hash of the role's token): a cookie
// dies with its expiry, with the process's key and with a change of the
// token it was traded for.
type authenticator struct {
	admin, operator [sha256.Size]byte
	hasOperator     bool
	key             []byte
	ttl             time.Duration
	now             func() time.Time
}

func newAuthenticator(admin, operator string, key []byte, ttl time.Duration, now func() time.Time) authenticator {
	return authenticator{
		admin:       sha256.Sum256([]byte(admin)),
		operator:    sha256.Sum256([]byte(operator)),
		hasOperator: operator != "",
		key:         key,
		ttl:         ttl,
		now:         now,
	}
}

// token returns the role of a token; both compares always run.
func (a authenticator) token(tok string) Role {
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

func (a authenticator) tokenHash(r Role) []byte {
	if r == RoleOperator {
		return a.operator[:]
	}
	return a.admin[:]
}

func (a authenticator) mac(payload []byte, r Role) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write(payload)
	m.Write(a.tokenHash(r))
	return m.Sum(nil)
}

// session returns a cookie value for r, valid for the TTL.
func (a authenticator) session(r Role) string {
	payload := make([]byte, 9, 9+sha256.Size)
	payload[0] = byte(r)
	binary.BigEndian.PutUint64(payload[1:], uint64(a.now().Add(a.ttl).Unix()))
	return base64.RawURLEncoding.EncodeToString(append(payload, a.mac(payload, r)...))
}

// cookie returns the role of a session cookie value.
func (a authenticator) cookie(v string) Role {
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

// csrf is the CSRF token of a session: only a page served to the cookie's
// holder can know it.
func (a authenticator) csrf(session string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("csrf\x00"))
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// who is a request's credential.
type who struct {
	role Role
	// session is the cookie value when the role came from the cookie ("" for
	// a bearer token, which needs no CSRF token: a browser never sends it
	// on its own).
	session string
}

// identify reads the bearer token, else the session cookie.
func (a authenticator) identify(c echo.Context) who {
	if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return who{}
		}
		return who{role: a.token(tok)}
	}
	if ck, err := c.Cookie(SessionCookie); err == nil {
		if r := a.cookie(ck.Value); r != RoleNone {
			return who{role: r, session: ck.Value}
		}
	}
	return who{}
}

// csrfOK checks an action's CSRF token; bearer requests need none.
func (a authenticator) csrfOK(c echo.Context, w who) bool {
	if w.session == "" {
		return true
	}
	got := c.Request().Header.Get("X-CSRF-Token")
	if got == "" {
		got = c.FormValue(CSRFField)
	}
	want := a.csrf(w.session)
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// sessionCookie builds the cookie a login sets (value "" and MaxAge -1
// clear it): HttpOnly, SameSite=Strict, Secure when the request came over
// TLS, scoped to the console.
func sessionCookie(c echo.Context, value string, ttl time.Duration) *http.Cookie {
	ck := &http.Cookie{
		Name:     SessionCookie,
		Value:    value,
		Path:     "/admin",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   c.Scheme() == "https",
		MaxAge:   int(ttl / time.Second),
	}
	if value == "" {
		ck.MaxAge = -1
	}
	return ck
}
