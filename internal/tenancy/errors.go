package tenancy

import (
	"errors"
	"net/http"
)

// Kind classifies why a request has no usable tenant. It alone decides the
// HTTP status and the machine-readable code of the response:
//
//	KindMissing          401  tenant_missing          the request names no tenant
//	KindInvalid          400  tenant_invalid          it names one, but the id is malformed
//	KindUnauthenticated  401  tenant_unauthenticated  the credential that should name it is not valid
//
// The split follows what the client can do about it: a 400 means "fix the id
// you sent", a 401 means "send (valid) credentials".
type Kind uint8

// The kinds of extraction failure.
const (
	// KindMissing: no header, no cookie, no Authorization header, or a host
	// that is not exactly one label under the base domain.
	KindMissing Kind = iota + 1
	// KindInvalid: an id is present but empty after decoding, too long, has
	// a byte outside [A-Za-z0-9._-], or the tenant header is repeated. Also
	// an authentic session or JWT whose id is malformed.
	KindInvalid
	// KindUnauthenticated: a session cookie or JWT that is malformed, badly
	// signed, expired, not yet valid, signed with an algorithm not allowed,
	// repeated, or without a string tenant claim.
	KindUnauthenticated
)

// Status returns the HTTP status for k.
func (k Kind) Status() int {
	if k == KindInvalid {
		return http.StatusBadRequest
	}
	return http.StatusUnauthorized
}

// Code returns the machine-readable code for k, as sent in the "code" field of
// the JSON error body.
func (k Kind) Code() string {
	switch k {
	case KindMissing:
		return "tenant_missing"
	case KindInvalid:
		return "tenant_invalid"
	default:
		return "tenant_unauthenticated"
	}
}

// String returns Code.
func (k Kind) String() string { return k.Code() }

// Sentinels for errors.Is; every *Error matches the one of its Kind.
var (
	// ErrMissing matches every *Error of KindMissing.
	ErrMissing = errors.New("tenancy: tenant missing")
	// ErrInvalid matches every *Error of KindInvalid.
	ErrInvalid = errors.New("tenancy: tenant id invalid")
	// ErrUnauthenticated matches every *Error of KindUnauthenticated.
	ErrUnauthenticated = errors.New("tenancy: tenant credential not valid")
)

// Error is the error returned by every failed extraction. Errors with a
// fixed reason are shared between requests to keep rejections allocation-free:
// treat an *Error as read-only.
type Error struct {
	// Kind decides the status code.
	Kind Kind
	// Reason is a short sentence safe to show to the client; it never
	// contains secrets or key material.
	Reason string
	// Err is the underlying cause (e.g. a JWT library error), for logs only;
	// it is not sent to the client. May be nil.
	Err error

	// challenge is the WWW-Authenticate value WriteError sends, if any.
	challenge string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return "tenancy: " + e.Reason + ": " + e.Err.Error()
	}
	return "tenancy: " + e.Reason
}

// Challenge is the WWW-Authenticate value (RFC 6750) an answer to this
// error should carry, "" for none.
func (e *Error) Challenge() string { return e.challenge }

// AsError returns the *Error an Extractor's error is. Every extractor error
// is one; anything else is reported as an unauthenticated request rather
// than passed on unexamined.
func AsError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return &Error{Kind: KindUnauthenticated, Reason: "tenant not established", Err: err}
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMissing) and friends work.
func (e *Error) Is(target error) bool {
	switch e.Kind {
	case KindMissing:
		return target == ErrMissing
	case KindInvalid:
		return target == ErrInvalid
	case KindUnauthenticated:
		return target == ErrUnauthenticated
	}
	return false
}

// Preallocated errors for the cases with a fixed reason, so that a rejected
// request on the header and subdomain paths allocates nothing either.
var (
	errHeaderMissing   = &Error{Kind: KindMissing, Reason: "tenant header missing"}
	errHeaderRepeated  = &Error{Kind: KindInvalid, Reason: "tenant header repeated"}
	errHostNoTenant    = &Error{Kind: KindMissing, Reason: "host is not a tenant subdomain"}
	errIDEmpty         = &Error{Kind: KindInvalid, Reason: "tenant id empty"}
	errIDTooLong       = &Error{Kind: KindInvalid, Reason: "tenant id too long"}
	errIDCharset       = &Error{Kind: KindInvalid, Reason: "tenant id has a character outside [A-Za-z0-9._-]"}
	errCookieMissing   = &Error{Kind: KindMissing, Reason: "session cookie missing"}
	errSessionBad      = &Error{Kind: KindUnauthenticated, Reason: "session cookie malformed"}
	errSessionSig      = &Error{Kind: KindUnauthenticated, Reason: "session cookie signature invalid"}
	errSessionExpired  = &Error{Kind: KindUnauthenticated, Reason: "session cookie expired"}
	errSessionRepeated = &Error{Kind: KindUnauthenticated, Reason: "session cookie repeated"}
	errAuthMissing     = &Error{Kind: KindMissing, Reason: "Authorization header missing", challenge: challengeBearer}
	errAuthNotBearer   = &Error{Kind: KindUnauthenticated, Reason: "Authorization header is not a bearer token", challenge: challengeInvalid}
	errAuthRepeated    = &Error{Kind: KindUnauthenticated, Reason: "Authorization header repeated", challenge: challengeInvalid}
	errTokenTooLong    = &Error{Kind: KindUnauthenticated, Reason: "bearer token too long", challenge: challengeInvalid}
	errClaimNotString  = &Error{Kind: KindUnauthenticated, Reason: "token tenant claim missing or not a string", challenge: challengeInvalid}
	errClaimEmpty      = &Error{Kind: KindUnauthenticated, Reason: "token tenant claim empty", challenge: challengeInvalid}
)

// RFC 6750 §3 challenges for the 401s of the jwt source.
const (
	challengeBearer  = `Bearer`
	challengeInvalid = `Bearer error="invalid_token"`
)
