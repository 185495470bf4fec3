package console

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
)

// Role is what a token may do (see consoleauth, which the router's console
// shares).
type Role = consoleauth.Role

// The roles. The zero Role is nobody.
const (
	RoleNone     = consoleauth.RoleNone
	RoleReader   = consoleauth.RoleReader
	RoleOperator = consoleauth.RoleOperator
)

// SessionCookie is the console's session cookie; CSRFField the form field
// that carries the CSRF token of every action.
const (
	SessionCookie = "cellgate_console"
	CSRFField     = consoleauth.CSRFField
)

// authenticator is consoleauth's, read through Echo's context.
type authenticator struct{ a consoleauth.Authenticator }

func newAuthenticator(admin, operator string, key []byte, ttl time.Duration, now func() time.Time) authenticator {
	return authenticator{consoleauth.New(consoleauth.Config{
		AdminToken: admin, OperatorToken: operator, Key: key, TTL: ttl, Now: now,
		Cookie: SessionCookie, Path: "/admin",
	})}
}

func (a authenticator) token(tok string) Role      { return a.a.Token(tok) }
func (a authenticator) session(r Role) string      { return a.a.Session(r) }
func (a authenticator) cookie(v string) Role       { return a.a.Cookie(v) }
func (a authenticator) csrf(session string) string { return a.a.CSRF(session) }

// who is a request's credential.
type who struct {
	role Role
	// session is the cookie value when the role came from the cookie ("" for
	// a bearer token, which needs no CSRF token).
	session string
}

// identify reads the bearer token, else the session cookie.
func (a authenticator) identify(c echo.Context) who {
	w := a.a.Identify(c.Request())
	return who{role: w.Role, session: w.Session}
}

// csrfOK checks an action's CSRF token; bearer requests need none.
func (a authenticator) csrfOK(c echo.Context, w who) bool {
	return a.a.CSRFOK(c.Request(), consoleauth.Who{Role: w.role, Session: w.session})
}

// cookies builds the console's session cookies (their name and path only).
var cookies = consoleauth.New(consoleauth.Config{Cookie: SessionCookie, Path: "/admin"})

// sessionCookie builds the cookie a login sets (value "" clears it).
func sessionCookie(c echo.Context, value string, ttl time.Duration) *http.Cookie {
	return cookies.SessionCookie(c.Request(), value, ttl)
}
