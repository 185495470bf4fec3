package tenancy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Every fuzz target asserts the same contract (checkOutcome): never a panic,
// and the result is either a typed error or a valid id. Seed corpora live in
// testdata/fuzz/<FuzzName>/ and run with every `go test`.

func FuzzHeader(f *testing.F) {
	for _, s := range []string{"acme", "", "a b", "ÄCME", "a,b", "\x00"} {
		f.Add(s)
	}
	x := newExtractorT(f, Config{Source: SourceHeader})
	f.Fuzz(func(t *testing.T, v string) {
		r := newRequest(t)
		r.Header.Set(DefaultHeader, v)
		id, err := x.Extract(r)
		checkOutcome(t, id, err, DefaultMaxIDLength)
		if err == nil && id != v {
			t.Fatalf("header %q gave id %q", v, id)
		}
		if err != nil && ValidateID(v, 0) == nil {
			t.Fatalf("valid id %q refused: %v", v, err)
		}
	})
}

func FuzzSubdomain(f *testing.F) {
	for _, s := range []string{"acme.example.com", "ACME.example.com:8080", "example.com", "a.b.example.com", "[::1]:80", ".example.com."} {
		f.Add(s)
	}
	x := newExtractorT(f, Config{Source: SourceSubdomain, BaseDomain: "example.com"})
	f.Fuzz(func(t *testing.T, host string) {
		r := newRequest(t)
		r.Host = host
		id, err := x.Extract(r)
		checkOutcome(t, id, err, DefaultMaxIDLength)
		if err == nil && (hasUpper(id) || len(host) < len(id)+len(".example.com")) {
			t.Fatalf("host %q gave id %q", host, id)
		}
	})
}

// FuzzSession fuzzes both an arbitrary cookie value and a cookie signed for
// an arbitrary tenant and lifetime: a signed cookie must give back exactly its
// tenant when that id is valid and the cookie not yet expired.
func FuzzSession(f *testing.F) {
	f.Add("v1.1.YWNtZQ.AAAA", "acme", int64(3600))
	f.Add("", "", int64(0))
	f.Add("v1..", "a b", int64(-1))
	x := newExtractorT(f, Config{Source: SourceSession, Session: SessionConfig{Key: testSessionKey}})
	f.Fuzz(func(t *testing.T, cookie, tenant string, ttl int64) {
		r := newRequest(t)
		r.Header.Set("Cookie", DefaultSessionCookie+"="+cookie)
		id, err := x.Extract(r)
		checkOutcome(t, id, err, DefaultMaxIDLength)

		ttl %= 1 << 32 // keep ttl*time.Second from overflowing a Duration
		signed := SignSession(testSessionKey, tenant, testNow.Add(time.Duration(ttl)*time.Second))
		id, err = x.Extract(cookieRequest(t, DefaultSessionCookie, signed))
		checkOutcome(t, id, err, DefaultMaxIDLength)
		if want := ValidateID(tenant, 0) == nil && ttl > 0; want != (err == nil) || (err == nil && id != tenant) {
			t.Fatalf("tenant %q ttl %d: got (%q, %v)", tenant, ttl, id, err)
		}
	})
}

// FuzzJWT fuzzes an arbitrary bearer token and a validly signed token whose
// tenant claim is arbitrary.
func FuzzJWT(f *testing.F) {
	f.Add("eyJhbGciOiJub25lIn0.eyJ0ZW5hbnQiOiJhY21lIn0.", "acme")
	f.Add("a.b.c", "")
	f.Add("", "ac me")
	x := newExtractorT(f, Config{Source: SourceJWT, JWT: JWTConfig{Algorithms: []string{"HS256"}, Key: testHMACKey}})
	f.Fuzz(func(t *testing.T, token, claim string) {
		r := newRequest(t)
		r.Header.Set("Authorization", "Bearer "+token)
		id, err := x.Extract(r)
		checkOutcome(t, id, err, DefaultMaxIDLength)

		signed := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(claim))
		id, err = x.Extract(bearerRequest(t, signed))
		checkOutcome(t, id, err, DefaultMaxIDLength)
		if want := ValidateID(claim, 0) == nil; want != (err == nil) || (err == nil && id != claim) {
			t.Fatalf("claim %q: got (%q, %v)", claim, id, err)
		}
	})
}

// FuzzJWTKeySet: any header a client writes (kid, crit, alg) over a key
// set never panics and never verifies without the right kid's key.
func FuzzJWTKeySet(f *testing.F) {
	f.Add(`{"alg":"HS256","kid":"k1"}`, true)
	f.Add(`{"alg":"HS256","kid":"k1","crit":["b64"],"b64":false}`, true)
	f.Add(`{"alg":"HS256","kid":["k1"]}`, true)
	f.Add(`{"alg":"HS256","kid":"k2"}`, false)
	set := []byte(`{"keys":[{"kty":"oct","kid":"k1","k":"` + base64.RawURLEncoding.EncodeToString(testHMACKey) + `"}]}`)
	x := newExtractorT(f, Config{Source: SourceJWT, JWT: JWTConfig{Algorithms: []string{"HS256"}, KeySet: set}})
	f.Fuzz(func(t *testing.T, header string, sign bool) {
		claims := `{"tenant":"acme","exp":` + strconv.FormatInt(testNow.Add(time.Hour).Unix(), 10) + `}`
		enc := base64.RawURLEncoding
		signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
		sig := []byte("x")
		if sign {
			m := hmac.New(sha256.New, testHMACKey)
			m.Write([]byte(signing))
			sig = m.Sum(nil)
		}
		id, err := x.Extract(bearerRequest(t, signing+"."+enc.EncodeToString(sig)))
		checkOutcome(t, id, err, DefaultMaxIDLength)
		if err == nil {
			var h map[string]any
			if json.Unmarshal([]byte(header), &h) != nil || h["kid"] != "k1" || h["crit"] != nil || !sign {
				t.Fatalf("header %s (signed %v) verified", header, sign)
			}
		}
	})
}
