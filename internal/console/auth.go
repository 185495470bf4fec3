package console

import (
	"time"

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

// newAuthenticator is consoleauth's, with the console's cookie name and
// path.
func newAuthenticator(admin, operator string, key []byte, ttl time.Duration, now func() time.Time) consoleauth.Authenticator {
	return consoleauth.New(consoleauth.Config{
		AdminToken: admin, OperatorToken: operator, Key: key, TTL: ttl, Now: now,
		Cookie: SessionCookie, Path: "/admin",
	})
}

// who is a request's credential.
type who = consoleauth.Who
