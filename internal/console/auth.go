package console

import (
	"crypto/sha256"

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

// newAuthenticator is consoleauth's, with the console's cookie name, path
// and settings.
func newAuthenticator(cfg Config) (*consoleauth.Authenticator, error) {
	nw, err := consoleauth.NewNetwork(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	m, err := consoleauth.NewMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return consoleauth.New(consoleauth.Config{
		AdminToken: cfg.AdminToken, OperatorToken: cfg.OperatorToken,
		Store: cfg.Sessions, TTL: cfg.SessionTTL, Idle: cfg.SessionIdle, Now: cfg.Now,
		Cookie: SessionCookie, Path: "/admin",
		Network: nw, SecureCookies: cfg.SecureCookies, Limiter: cfg.Limiter, Metrics: m,
		Console: "cell", Logger: cfg.Logger, OIDC: cfg.OIDC,
	})
}

// confirmKey is the key of bulk confirmations: a hash of the operator
// token and the OpenID client secret, the same in every process of the
// cell, and secret when either is set (with OpenID operators and no
// operator token, the token alone would be the empty string).
func confirmKey(operator string, oidc *consoleauth.OIDCConfig) []byte {
	secret := ""
	if oidc != nil {
		secret = oidc.ClientSecret
	}
	sum := sha256.Sum256([]byte("cellgate console bulk confirmation\x00" + operator + "\x00" + secret))
	return sum[:]
}

// who is a request's credential.
type who = consoleauth.Who
