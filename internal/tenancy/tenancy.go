// Package tenancy finds and validates the tenant of an HTTP request.
//
// It has one job: turn a request into a tenant id, or into a typed error that
// says why there is none. The id comes from one configured Source (a header, a
// subdomain, a signed session cookie or a JWT). It knows net/http only: the
// cells' Echo middleware (internal/runtime/tenantmw) and the cell router
// (internal/cells/router) both build their Extractor from the same spec block
// with FromSpec, so they agree on every request. Concurrency caps (bulkheads)
// are built on top of this package elsewhere; nothing here counts or limits
// requests.
//
// Concurrency contract: a Config must not be mutated while NewExtractor
// reads it. Everything this package returns (Extractor, PublicPaths) is safe
// for concurrent use by any number of goroutines and immutable after
// construction, with one exception: the key set of a JWKS URL
// (JWTConfig.KeySetURL), which one background goroutine per Extractor
// replaces whole, atomically, after each fetch (Close stops it). The package
// holds no mutable global state.
package tenancy

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Source names where the tenant id of a request comes from.
type Source string

// The supported sources.
const (
	// SourceHeader reads the id from a request header (Config.Header). The
	// client chooses its tenant.
	SourceHeader Source = "header"
	// SourceSubdomain reads the id from the one DNS label in front of
	// Config.BaseDomain in the Host header. The client chooses its tenant.
	SourceSubdomain Source = "subdomain"
	// SourceSession reads the id from an HMAC-SHA256 signed cookie issued with
	// SignSession.
	SourceSession Source = "session"
	// SourceJWT reads the id from a claim of a verified bearer JWT.
	SourceJWT Source = "jwt"
)

// ParseSource returns the Source named s, or an error for an unknown name.
func ParseSource(s string) (Source, error) {
	switch src := Source(s); src {
	case SourceHeader, SourceSubdomain, SourceSession, SourceJWT:
		return src, nil
	}
	return "", fmt.Errorf("tenancy: unknown source %q (want header, subdomain, session or jwt)", s)
}

// Defaults. They are applied in one place: DefaultConfig, which WithConfig and
// NewExtractor use to fill zero fields.
const (
	// DefaultHeader is the header read by SourceHeader.
	DefaultHeader = "X-Tenant-ID"
	// DefaultMaxIDLength is the longest accepted tenant id, in bytes.
	DefaultMaxIDLength = 64
	// DefaultSessionCookie is the cookie read by SourceSession.
	DefaultSessionCookie = "cellgate_tenant"
	// DefaultClaim is the JWT claim read by SourceJWT.
	DefaultClaim = "tenant"

	// maxIDLengthLimit bounds Config.MaxIDLength: ids end up in URLs, logs,
	// slot hashes and database columns, where an unbounded key is a liability.
	maxIDLengthLimit = 255
)

// Config configures an Extractor.
type Config struct {
	// Source is where the tenant id comes from. Default: SourceHeader.
	Source Source

	// Header is the request header read by SourceHeader. Matched
	// case-insensitively, like every HTTP header name. Default: X-Tenant-ID.
	Header string

	// BaseDomain is the domain under which SourceSubdomain finds tenants:
	// with "example.com", host "acme.example.com" is tenant "acme". Compared
	// case-insensitively; leading and trailing dots are ignored. Required for
	// SourceSubdomain, ignored otherwise.
	BaseDomain string

	// MaxIDLength is the longest accepted tenant id in bytes, 1..255.
	// Default: 64.
	MaxIDLength int

	// Session configures SourceSession; ignored for other sources.
	Session SessionConfig

	// JWT configures SourceJWT; ignored for other sources.
	JWT JWTConfig

	// Now is the clock used to check session and JWT expiry and to space
	// the fetches of a JWKS URL, injectable so tests don't sleep. Default:
	// time.Now.
	Now func() time.Time

	// Logger hears what the background work of a JWKS URL key set finds
	// (failed fetches, skipped keys). Default: nothing is logged.
	Logger *slog.Logger

	// Registerer receives the cellgate_tenancy_jwks_* metrics of a JWKS URL
	// key set. Default: none are kept.
	Registerer prometheus.Registerer
}

// SessionConfig configures SourceSession.
type SessionConfig struct {
	// Cookie is the name of the session cookie. Default: cellgate_tenant.
	Cookie string

	// Key is the HMAC-SHA256 key, at least 32 bytes. The server reads it from
	// an environment variable; never commit it. Required for SourceSession.
	Key []byte
}

// JWTConfig configures SourceJWT. The token is read from
// "Authorization: Bearer <token>".
type JWTConfig struct {
	// Algorithms is the explicit allow-list of signing algorithms, all of one
	// family: HMAC (HS256, HS384, HS512), RSA (RS256, RS384, RS512, PS256,
	// PS384, PS512) or ECDSA (ES256, ES384, ES512). A token signed with any
	// other algorithm, "none" included, is rejected. Required for SourceJWT.
	Algorithms []string

	// Key verifies signatures. Exactly one of Key, KeySet and KeySetURL is
	// required for SourceJWT. For HMAC it is the raw secret, at least as
	// long as the hash output (32 bytes for HS256). For RSA and ECDSA it is a
	// PEM public key (PKIX or PKCS#1) or certificate; RSA keys must have at
	// least 2048 bits and ECDSA curves must match every listed algorithm. The
	// server reads it from an environment variable or a file.
	Key []byte

	// KeySet, instead of Key, is a JWKS document (RFC 7517: {"keys": [...]})
	// of verification keys, all of the family of Algorithms: "oct" secrets,
	// "RSA" or "EC" public keys. A token's kid header selects its key; a
	// token without a kid, or naming a key not in the set, is refused. A
	// JWK's alg, when set, is the only algorithm its key verifies. Rotation
	// is adding the new key, switching the signers, then dropping the old
	// key (docs/tenancy.md).
	KeySet []byte

	// KeySetURL, instead of Key or KeySet, is the identity provider's JWKS
	// URL (the jwks_uri of its OpenID discovery document), https unless on
	// loopback, for RSA or ECDSA algorithms. The set is fetched when the
	// Extractor is built, every KeySetRefresh, and when a token names a kid
	// not in it, at most once per UnknownKIDInterval. Its keys are checked
	// as KeySet's are, but an unusable key (another family, use "enc") is
	// skipped rather than refusing the set. A failed fetch keeps the last
	// good set and marks it stale (KeySetReporter, the
	// cellgate_tenancy_jwks_* metrics). A provider down at start does not
	// fail NewExtractor: tokens are refused until a fetch succeeds.
	KeySetURL string

	// KeySetRefresh is how often KeySetURL is fetched on schedule. Default:
	// 15m.
	KeySetRefresh time.Duration

	// UnknownKIDInterval is the least time between two fetches of
	// KeySetURL that tokens with an unknown kid cause; a fetch for any other
	// reason also starts it again. Default: 10s.
	UnknownKIDInterval time.Duration

	// KeySetTimeout bounds one fetch of KeySetURL. Default: 10s.
	KeySetTimeout time.Duration

	// KeySetClient fetches KeySetURL (a custom CA, a proxy); its answers
	// are capped at 1 MiB and it never follows a redirect from https to
	// http. Default: a client with http.DefaultTransport.
	KeySetClient *http.Client

	// Claim names the claim holding the tenant id; it must be a JSON string.
	// Default: tenant.
	Claim string

	// PlanClaim, when set, names the claim holding the tenant's plan
	// (PlanExtractor); a missing or non-string claim is no plan.
	PlanClaim string

	// Leeway is the clock skew tolerated when checking exp, nbf and iat (a
	// token issued in the future beyond it is refused). Must not be
	// negative. Default: 0.
	Leeway time.Duration

	// Issuer, when set, must equal the token's iss claim. Optional.
	Issuer string

	// Audience, when set, must be one of the token's aud values. Optional.
	Audience string
}

// DefaultConfig holds every default of this package. NewExtractor copies a
// default into each zero field of the Config it gets.
var DefaultConfig = Config{
	Source:      SourceHeader,
	Header:      DefaultHeader,
	MaxIDLength: DefaultMaxIDLength,
	Session:     SessionConfig{Cookie: DefaultSessionCookie},
	JWT:         JWTConfig{Claim: DefaultClaim},
	Now:         time.Now,
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	// Field is the Config field at fault, e.g. "JWT.Algorithms".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return "tenancy: config " + e.Field + ": " + e.Reason
}

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// withDefaults returns cfg with every zero field taken from DefaultConfig.
// Slices and byte keys are not defaulted: their zero value means "not set".
func withDefaults(cfg Config) Config {
	d := DefaultConfig
	cfg.Source = cmp.Or(cfg.Source, d.Source)
	cfg.Header = cmp.Or(cfg.Header, d.Header)
	cfg.MaxIDLength = cmp.Or(cfg.MaxIDLength, d.MaxIDLength)
	cfg.Session.Cookie = cmp.Or(cfg.Session.Cookie, d.Session.Cookie)
	cfg.JWT.Claim = cmp.Or(cfg.JWT.Claim, d.JWT.Claim)
	if cfg.Now == nil {
		cfg.Now = d.Now
	}
	return cfg
}
