package tenancy

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/cellgate/cellgate/internal/config"
)

// mintKid signs claims with a kid (and extra header fields) in the header.
func mintKid(tb testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims, header map[string]any) string {
	tb.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]any {
	size := (k.Curve.Params().BitSize + 7) / 8
	point, err := k.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	return map[string]any{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name,
		"x": b64u(point[1 : 1+size]), "y": b64u(point[1+size:])}
}

func octJWK(kid string, secret []byte) map[string]any {
	return map[string]any{"kty": "oct", "kid": kid, "k": b64u(secret)}
}

func jwks(tb testing.TB, keys ...map[string]any) []byte {
	tb.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func setExtractor(tb testing.TB, algs []string, set []byte) Extractor {
	tb.Helper()
	return newExtractorT(tb, Config{Source: SourceJWT, JWT: JWTConfig{Algorithms: algs, KeySet: set}})
}

// TestJWTKeySetRotation walks a rotation: the set holds the old key, then
// both (tokens of either verify, each by its kid), then only the new one.
func TestJWTKeySetRotation(t *testing.T) {
	old, next := rsaKeys()[0], rsaKeys()[1]
	oldTok := mintKid(t, jwt.SigningMethodRS256, old, "2026-01", goodClaims("acme"), nil)
	newTok := mintKid(t, jwt.SigningMethodRS256, next, "2026-07", goodClaims("acme"), nil)
	// A token claiming the other key's kid does not verify with it.
	swapped := mintKid(t, jwt.SigningMethodRS256, old, "2026-07", goodClaims("acme"), nil)
	algs := []string{"RS256"}

	before := setExtractor(t, algs, jwks(t, rsaJWK("2026-01", &old.PublicKey)))
	during := setExtractor(t, algs, jwks(t, rsaJWK("2026-01", &old.PublicKey), rsaJWK("2026-07", &next.PublicKey)))
	after := setExtractor(t, algs, jwks(t, rsaJWK("2026-07", &next.PublicKey)))

	id, err := before.Extract(bearerRequest(t, oldTok))
	wantID(t, id, err, "acme")
	id, err = before.Extract(bearerRequest(t, newTok))
	if e := wantKind(t, id, err, KindUnauthenticated); e.Reason != "token signed with an unknown key" {
		t.Errorf("new key before it is added: %q", e.Reason)
	}
	for _, tok := range []string{oldTok, newTok} {
		id, err := during.Extract(bearerRequest(t, tok))
		wantID(t, id, err, "acme")
	}
	id, err = during.Extract(bearerRequest(t, swapped))
	wantKind(t, id, err, KindUnauthenticated)
	id, err = after.Extract(bearerRequest(t, newTok))
	wantID(t, id, err, "acme")
	id, err = after.Extract(bearerRequest(t, oldTok))
	wantKind(t, id, err, KindUnauthenticated)
}

func TestJWTKeySetFamilies(t *testing.T) {
	ec := ecKeys()["P256"]
	x := setExtractor(t, []string{"ES256"}, jwks(t, ecJWK("e1", &ec.PublicKey)))
	id, err := x.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodES256, ec, "e1", goodClaims("acme"), nil)))
	wantID(t, id, err, "acme")

	secret := []byte(strings.Repeat("s", 32))
	hs := setExtractor(t, []string{"HS256"}, jwks(t, octJWK("h1", secret), octJWK("h2", testHMACKey)))
	for kid, key := range map[string][]byte{"h1": secret, "h2": testHMACKey} {
		id, err := hs.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodHS256, key, kid, goodClaims("acme"), nil)))
		wantID(t, id, err, "acme")
	}
	id, err = hs.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodHS256, secret, "", goodClaims("acme"), nil)))
	wantKind(t, id, err, KindUnauthenticated) // no kid: no key

	// A JWK's alg is the only algorithm its key verifies.
	hs2 := setExtractor(t, []string{"HS256", "HS384"}, jwks(t, func() map[string]any {
		k := octJWK("p", []byte(strings.Repeat("k", 48)))
		k["alg"] = "HS384"
		return k
	}()))
	id, err = hs2.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodHS256, []byte(strings.Repeat("k", 48)), "p", goodClaims("acme"), nil)))
	wantKind(t, id, err, KindUnauthenticated)
	id, err = hs2.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodHS384, []byte(strings.Repeat("k", 48)), "p", goodClaims("acme"), nil)))
	wantID(t, id, err, "acme")
}

func TestJWTKeySetConfigErrors(t *testing.T) {
	rsa0 := &rsaKeys()[0].PublicKey
	ec := &ecKeys()["P384"].PublicKey
	noKid := rsaJWK("", rsa0)
	encKey := rsaJWK("r", rsa0)
	encKey["use"] = "enc"
	private := rsaJWK("r", rsa0)
	private["d"] = "AQAB"
	badPoint := ecJWK("e", &ecKeys()["P256"].PublicKey)
	badPoint["y"] = b64u([]byte{1, 2, 3})
	cases := []struct {
		name string
		algs []string
		set  []byte
		want string
	}{
		{"not JSON", []string{"RS256"}, []byte("{"), "JWT.KeySet"},
		{"empty", []string{"RS256"}, []byte(`{"keys":[]}`), "JWT.KeySet"},
		{"no kid", []string{"RS256"}, jwks(t, noKid), "JWT.KeySet.keys[0]"},
		{"duplicate kid", []string{"RS256"}, jwks(t, rsaJWK("r", rsa0), rsaJWK("r", rsa0)), "JWT.KeySet.keys[1]"},
		{"use enc", []string{"RS256"}, jwks(t, encKey), "JWT.KeySet.keys[0]"},
		{"private key", []string{"RS256"}, jwks(t, private), "JWT.KeySet.keys[0]"},
		{"RSA key for ES256", []string{"ES256"}, jwks(t, rsaJWK("r", rsa0)), "JWT.KeySet.keys[0]"},
		{"P-384 key for ES256", []string{"ES256"}, jwks(t, ecJWK("e", ec)), "JWT.KeySet.keys[0]"},
		{"point off the curve", []string{"ES256"}, jwks(t, badPoint), "JWT.KeySet.keys[0]"},
		{"short HMAC secret", []string{"HS256"}, jwks(t, octJWK("h", []byte("short"))), "JWT.KeySet.keys[0]"},
		{"alg not allowed", []string{"RS256"}, jwks(t, func() map[string]any { k := rsaJWK("r", rsa0); k["alg"] = "RS512"; return k }()), "JWT.KeySet.keys[0]"},
	}
	for _, tc := range cases {
		_, err := NewExtractor(Config{Source: SourceJWT, JWT: JWTConfig{Algorithms: tc.algs, KeySet: tc.set}})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.want {
			t.Errorf("%s: %v, want a ConfigError on %s", tc.name, err, tc.want)
		}
	}
	_, err := NewExtractor(Config{Source: SourceJWT, JWT: JWTConfig{Algorithms: []string{"HS256"}, Key: testHMACKey,
		KeySet: jwks(t, octJWK("h", testHMACKey))}})
	if err == nil {
		t.Error("Key and KeySet together accepted")
	}
}

// TestJWTCritRefused: RFC 7515 §4.1.11, a crit entry this server does not
// understand (it understands none) refuses the token, even well signed.
func TestJWTCritRefused(t *testing.T) {
	x := hsExtractor(t, nil)
	for _, crit := range []any{[]string{"exp"}, []string{"b64"}, []string{}, "b64"} {
		tok := mintKid(t, jwt.SigningMethodHS256, testHMACKey, "", goodClaims("acme"), map[string]any{"crit": crit, "b64": true})
		id, err := x.Extract(bearerRequest(t, tok))
		if e := wantKind(t, id, err, KindUnauthenticated); !strings.Contains(e.Reason, "critical") {
			t.Errorf("crit %v: reason %q", crit, e.Reason)
		}
	}
}

// TestJWTIssuedInTheFuture: iat after now beyond the leeway is refused;
// within the leeway, or in the past, it passes.
func TestJWTIssuedInTheFuture(t *testing.T) {
	claims := func(iat time.Time) jwt.MapClaims {
		c := goodClaims("acme")
		c["iat"] = iat.Unix()
		return c
	}
	strict := hsExtractor(t, nil)
	lenient := hsExtractor(t, func(c *JWTConfig) { c.Leeway = time.Minute })
	future := mint(t, jwt.SigningMethodHS256, testHMACKey, claims(testNow.Add(30*time.Second)))
	id, err := strict.Extract(bearerRequest(t, future))
	if e := wantKind(t, id, err, KindUnauthenticated); e.Reason != "token issued in the future" {
		t.Errorf("reason %q", e.Reason)
	}
	id, err = lenient.Extract(bearerRequest(t, future))
	wantID(t, id, err, "acme")
	id, err = lenient.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims(testNow.Add(2*time.Minute)))))
	wantKind(t, id, err, KindUnauthenticated)
	id, err = strict.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims(testNow.Add(-time.Hour)))))
	wantID(t, id, err, "acme")
	bad := goodClaims("acme")
	bad["iat"] = "yesterday"
	id, err = strict.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, bad)))
	wantKind(t, id, err, KindUnauthenticated)
}

// TestFromSpecReadsJWKSFile: tenancy.jwt.jwks_file is read, and a missing
// file is named by its spec field.
func TestFromSpecReadsJWKSFile(t *testing.T) {
	path := t.TempDir() + "/jwks.json"
	if err := os.WriteFile(path, jwks(t, octJWK("h1", testHMACKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := config.Tenancy{Source: "jwt", MaxIDBytes: 64, JWT: config.JWTSource{
		Algorithms: []string{"HS256"}, Claim: "tenant", JWKSFile: path,
	}}
	cfg, err := FromSpec(spec, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Now = fixedClock
	x, err := NewExtractor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := x.Extract(bearerRequest(t, mintKid(t, jwt.SigningMethodHS256, testHMACKey, "h1", goodClaims("acme"), nil)))
	wantID(t, id, err, "acme")

	spec.JWT.JWKSFile = path + ".missing"
	if _, err := FromSpec(spec, func(string) string { return "" }); err == nil || !strings.HasPrefix(err.Error(), "tenancy.jwt.jwks_file:") {
		t.Fatalf("missing file: %v", err)
	}
}
