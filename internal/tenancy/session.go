package tenancy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Session cookie format, version 1 (all parts ASCII, cookie-safe):
//
//	v1.<expiry>.<tenant>.<mac>
//
//	expiry  Unix time in seconds, decimal digits; the cookie is valid while
//	        now < expiry.
//	tenant  the tenant id, base64url without padding (RFC 4648 §5).
//	mac     HMAC-SHA256(key, "cellgate-tenant-session:" + "v1.<expiry>.<tenant>"),
//	        base64url without padding (43 characters).
//
// The label in front of the MAC input keeps a MAC made for another purpose
// with the same key from ever passing as a session. The cookie is signed, not
// encrypted: the tenant id is readable by the client.
const (
	sessionVersion  = "v1."
	sessionMACLabel = "cellgate-tenant-session:"
	// minSessionKey is the SHA-256 output size; RFC 2104 calls shorter keys
	// strongly discouraged because they weaken the MAC.
	minSessionKey = 32
	// maxSessionCookie bounds the work done on a cookie before its MAC is
	// checked; a valid cookie for a 255-byte id is under 400 bytes.
	maxSessionCookie = 512
	macB64Len        = 43 // base64url of 32 bytes, no padding
)

var b64 = base64.RawURLEncoding.Strict()

// SignSession returns a session cookie value that makes the bearer tenant
// tenant until expiry (to the second, rounded down). key must be the
// Session.Key the middleware is configured with; the middleware refuses keys
// shorter than 32 bytes, so a cookie signed with one is never accepted.
//
// SignSession does not validate tenant (it has no error to return): a cookie
// whose id fails ValidateID is refused with KindInvalid when used. Call
// ValidateID first. Set the cookie HttpOnly, Secure and SameSite=Lax or
// Strict, with the same expiry.
func SignSession(key []byte, tenant string, expiry time.Time) string {
	signed := sessionVersion + strconv.FormatInt(expiry.Unix(), 10) + "." +
		b64.EncodeToString([]byte(tenant))
	return signed + "." + b64.EncodeToString(sessionMAC(key, signed))
}

func sessionMAC(key []byte, signed string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sessionMACLabel))
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// fromSession refuses a repeated cookie: a sibling subdomain can plant a
// second cookie of the same name ("cookie tossing"), and which one comes
// first is up to the browser.
func (x *extractor) fromSession(r *http.Request) (string, *Error) {
	cs := r.CookiesNamed(x.cookie)
	switch {
	case len(cs) == 0 || (len(cs) == 1 && cs[0].Value == ""):
		return "", errCookieMissing
	case len(cs) > 1:
		return "", errSessionRepeated
	}
	return x.verifySession(cs[0].Value)
}

// verifySession checks the MAC before trusting any field, then the expiry,
// then the id.
func (x *extractor) verifySession(v string) (string, *Error) {
	if len(v) > maxSessionCookie || !strings.HasPrefix(v, sessionVersion) {
		return "", errSessionBad
	}
	rest := v[len(sessionVersion):]
	i := strings.IndexByte(rest, '.')
	j := strings.LastIndexByte(rest, '.')
	if i <= 0 || j <= i || len(rest)-j-1 != macB64Len {
		return "", errSessionBad
	}
	got, err := b64.DecodeString(rest[j+1:])
	if err != nil {
		return "", errSessionBad
	}
	if !hmac.Equal(got, sessionMAC(x.sessionKey, v[:len(sessionVersion)+j])) {
		return "", errSessionSig
	}
	expStr := rest[:i]
	for k := 0; k < len(expStr); k++ {
		if expStr[k] < '0' || expStr[k] > '9' {
			return "", errSessionBad
		}
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if err != nil {
		return "", errSessionBad
	}
	if x.now().Unix() >= exp {
		return "", errSessionExpired
	}
	raw, err := b64.DecodeString(rest[i+1 : j])
	if err != nil {
		return "", errSessionBad
	}
	id := string(raw)
	if e := validateID(id, x.maxLen); e != nil {
		return "", e
	}
	return id, nil
}
