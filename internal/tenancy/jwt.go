package tenancy

import (
	"bytes"
	"crypto/elliptic"
	"errors"
	"net/http"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// maxToken bounds the work done on a bearer token before its signature is
// checked. Real tenant tokens are well under 2 KiB.
const maxToken = 8 << 10

// minRSABits follows NIST SP 800-131A: RSA below 2048 bits is disallowed.
const minRSABits = 2048

type keyFamily uint8

const (
	familyHMAC keyFamily = iota + 1
	familyRSA
	familyECDSA
)

// jwtAlgs lists the allowed algorithm names, their family, and for HMAC the
// minimum key size (RFC 7518 §3.2: at least the hash output) and for ECDSA
// the curve the key must be on.
var jwtAlgs = map[string]struct {
	family  keyFamily
	hmacKey int
	curve   elliptic.Curve
}{
	"HS256": {family: familyHMAC, hmacKey: 32},
	"HS384": {family: familyHMAC, hmacKey: 48},
	"HS512": {family: familyHMAC, hmacKey: 64},
	"RS256": {family: familyRSA},
	"RS384": {family: familyRSA},
	"RS512": {family: familyRSA},
	"PS256": {family: familyRSA},
	"PS384": {family: familyRSA},
	"PS512": {family: familyRSA},
	"ES256": {family: familyECDSA, curve: elliptic.P256()},
	"ES384": {family: familyECDSA, curve: elliptic.P384()},
	"ES512": {family: familyECDSA, curve: elliptic.P521()},
}

// initJWT parses the key once and builds one parser shared by all requests
// (a jwt.Parser is read-only after construction).
func (x *extractor) initJWT(cfg Config) error {
	c := cfg.JWT
	if len(c.Algorithms) == 0 {
		return configErr("JWT.Algorithms", "required: list the allowed signing algorithms explicitly")
	}
	var family keyFamily
	for _, alg := range c.Algorithms {
		a, ok := jwtAlgs[alg]
		if !ok {
			return configErr("JWT.Algorithms", "%q is not supported (want HS256/384/512, RS256/384/512, PS256/384/512 or ES256/384/512)", alg)
		}
		if family != 0 && a.family != family {
			// One key cannot serve two families; allowing both is also the
			// precondition of the RS->HS key-confusion attack.
			return configErr("JWT.Algorithms", "mixes HMAC, RSA and ECDSA algorithms; one key serves one family")
		}
		family = a.family
	}
	if c.Leeway < 0 {
		return configErr("JWT.Leeway", "must not be negative, got %s", c.Leeway)
	}
	if c.Issuer != "" && strings.TrimSpace(c.Issuer) != c.Issuer {
		return configErr("JWT.Issuer", "%q has surrounding spaces; no token's iss would match", c.Issuer)
	}
	if c.Audience != "" && strings.TrimSpace(c.Audience) != c.Audience {
		return configErr("JWT.Audience", "%q has surrounding spaces; no token's aud would match", c.Audience)
	}
	var given []string
	for _, g := range []struct {
		name string
		set  bool
	}{{"JWT.Key", len(c.Key) > 0}, {"JWT.KeySet", len(c.KeySet) > 0}, {"JWT.KeySetURL", c.KeySetURL != ""}} {
		if g.set {
			given = append(given, g.name)
		}
	}
	if len(given) != 1 {
		return configErr("JWT.Key", "give exactly one of JWT.Key, JWT.KeySet and JWT.KeySetURL for source %q, got %d (%s)", SourceJWT, len(given), strings.Join(given, ", "))
	}
	var key any
	var keys map[string]setKey
	var remote *remoteSet
	var err error
	switch {
	case len(c.KeySet) > 0:
		keys, err = parseKeySet(c.KeySet, family, c.Algorithms)
	case c.KeySetURL != "":
		remote, err = newRemoteSet(c, family, cfg.Now, cfg.Logger, cfg.Registerer)
	default:
		key, err = parseKey(c.Key, family, c.Algorithms)
	}
	if err != nil {
		return err
	}
	x.remote = remote
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(append([]string(nil), c.Algorithms...)),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), // an iat in the future, beyond the leeway, is refused
		jwt.WithLeeway(c.Leeway),
		jwt.WithTimeFunc(cfg.Now),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	x.parser = jwt.NewParser(opts...)
	x.claim = c.Claim
	x.plan = c.PlanClaim
	// WithValidMethods already refuses other algorithms; checking the method
	// type again here means the key can never be handed to a verifier of
	// another family, whatever the parser does.
	x.keyFunc = func(t *jwt.Token) (any, error) {
		var ok bool
		switch family {
		case familyHMAC:
			_, ok = t.Method.(*jwt.SigningMethodHMAC)
		case familyRSA:
			switch t.Method.(type) {
			case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
				ok = true
			}
		case familyECDSA:
			_, ok = t.Method.(*jwt.SigningMethodECDSA)
		}
		if !ok {
			return nil, errWrongFamily
		}
		if _, crit := t.Header["crit"]; crit {
			// RFC 7515 §4.1.11: a recipient that does not understand a
			// critical extension must refuse the token. This one
			// understands none.
			return nil, errCritical
		}
		if keys == nil && remote == nil {
			return key, nil
		}
		kid, _ := t.Header["kid"].(string)
		var k setKey
		var found bool
		if remote != nil {
			k, found = remote.key(kid)
		} else {
			k, found = keys[kid]
		}
		switch {
		case !found:
			return nil, errUnknownKid
		case k.alg != "" && k.alg != t.Method.Alg():
			return nil, errWrongFamily
		}
		return k.key, nil
	}
	return nil
}

// parseKey reads the single verification key of c.Key.
func parseKey(raw []byte, family keyFamily, algs []string) (any, error) {
	switch family {
	case familyHMAC:
		if bytes.Contains(raw, []byte("-----BEGIN")) {
			return nil, configErr("JWT.Key", "looks like a PEM key; HMAC algorithms take a raw secret")
		}
		for _, alg := range algs {
			if n := jwtAlgs[alg].hmacKey; len(raw) < n {
				return nil, configErr("JWT.Key", "%s needs a key of at least %d bytes, got %d", alg, n, len(raw))
			}
		}
		return append([]byte(nil), raw...), nil
	case familyRSA:
		k, err := jwt.ParseRSAPublicKeyFromPEM(raw)
		if err != nil {
			return nil, configErr("JWT.Key", "not a PEM RSA public key: %v", err)
		}
		if k.N.BitLen() < minRSABits {
			return nil, configErr("JWT.Key", "RSA key has %d bits, want at least %d", k.N.BitLen(), minRSABits)
		}
		return k, nil
	default:
		k, err := jwt.ParseECPublicKeyFromPEM(raw)
		if err != nil {
			return nil, configErr("JWT.Key", "not a PEM ECDSA public key: %v", err)
		}
		for _, alg := range algs {
			if want := jwtAlgs[alg].curve; k.Curve != want {
				return nil, configErr("JWT.Key", "%s needs curve %s, key is on %s", alg, want.Params().Name, k.Curve.Params().Name)
			}
		}
		return k, nil
	}
}

var (
	errWrongFamily = errors.New("signing method does not match the configured key")
	errCritical    = errors.New("token header has a crit entry; no critical extension is understood")
	errUnknownKid  = errors.New("token kid names no key of the key set")
)

func (x *extractor) fromJWT(r *http.Request) (string, *Error) {
	id, _, e := x.fromJWTPlan(r)
	return id, e
}

// fromJWTPlan verifies the bearer token and returns its tenant and, with a
// plan claim configured, its plan ("" when absent or not a string).
func (x *extractor) fromJWTPlan(r *http.Request) (string, string, *Error) {
	vs := r.Header["Authorization"]
	switch {
	case len(vs) == 0:
		return "", "", errAuthMissing
	case len(vs) > 1:
		return "", "", errAuthRepeated
	}
	token, ok := bearer(vs[0])
	if !ok {
		return "", "", errAuthNotBearer
	}
	if len(token) > maxToken {
		return "", "", errTokenTooLong
	}
	claims := jwt.MapClaims{}
	if _, err := x.parser.ParseWithClaims(token, claims, x.keyFunc); err != nil {
		return "", "", &Error{Kind: KindUnauthenticated, Reason: jwtReason(err), Err: err, challenge: challengeInvalid}
	}
	id, ok := claims[x.claim].(string)
	if !ok {
		return "", "", errClaimNotString
	}
	if id == "" {
		return "", "", errClaimEmpty
	}
	if e := validateID(id, x.maxLen); e != nil {
		return "", "", e
	}
	var plan string
	if x.plan != "" {
		plan, _ = claims[x.plan].(string)
	}
	return id, plan, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" value. The
// scheme is case-insensitive (RFC 9110 §11.1).
func bearer(v string) (string, bool) {
	const scheme = "Bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	t := strings.TrimLeft(v[len(scheme):], " ")
	if t == "" || strings.ContainsAny(t, " \t") {
		return "", false
	}
	return t, true
}

// jwtReason maps a jwt error onto a short client-safe sentence; the full
// error stays in Error.Err for logs.
func jwtReason(err error) string {
	switch {
	case errors.Is(err, errCritical):
		return "token uses a critical header extension this server does not understand"
	case errors.Is(err, errUnknownKid):
		return "token signed with an unknown key"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token issued in the future"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token lacks a required claim"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "token issuer or audience not accepted"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token signature invalid or algorithm not allowed"
	default:
		return "token malformed or invalid"
	}
}
