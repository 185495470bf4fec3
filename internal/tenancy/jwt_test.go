package tenancy

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func hsExtractor(tb testing.TB, mod func(*JWTConfig)) Extractor {
	tb.Helper()
	c := JWTConfig{Algorithms: []string{"HS256"}, Key: testHMACKey}
	if mod != nil {
		mod(&c)
	}
	return newExtractorT(tb, Config{Source: SourceJWT, JWT: c})
}

func rsExtractor(tb testing.TB) Extractor {
	tb.Helper()
	return newExtractorT(tb, Config{Source: SourceJWT, JWT: JWTConfig{
		Algorithms: []string{"RS256"}, Key: pemPublic(tb, &rsaKeys()[0].PublicKey),
	}})
}

func esExtractor(tb testing.TB) Extractor {
	tb.Helper()
	return newExtractorT(tb, Config{Source: SourceJWT, JWT: JWTConfig{
		Algorithms: []string{"ES256"}, Key: pemPublic(tb, &ecKeys()["P256"].PublicKey),
	}})
}

func TestJWTHappyPaths(t *testing.T) {
	t.Run("HS256", func(t *testing.T) {
		tok := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme"))
		id, err := hsExtractor(t, nil).Extract(bearerRequest(t, tok))
		wantID(t, id, err, "acme")
	})
	t.Run("RS256", func(t *testing.T) {
		tok := mint(t, jwt.SigningMethodRS256, rsaKeys()[0], goodClaims("Acme_1"))
		id, err := rsExtractor(t).Extract(bearerRequest(t, tok))
		wantID(t, id, err, "Acme_1")
	})
	t.Run("RS256 PKCS1 key, PS256 too", func(t *testing.T) {
		der := x509.MarshalPKCS1PublicKey(&rsaKeys()[0].PublicKey)
		x := newExtractorT(t, Config{Source: SourceJWT, JWT: JWTConfig{
			Algorithms: []string{"RS256", "PS256"},
			Key:        pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: der}),
		}})
		for _, m := range []jwt.SigningMethod{jwt.SigningMethodRS256, jwt.SigningMethodPS256} {
			id, err := x.Extract(bearerRequest(t, mint(t, m, rsaKeys()[0], goodClaims("acme"))))
			wantID(t, id, err, "acme")
		}
	})
	t.Run("ES256", func(t *testing.T) {
		tok := mint(t, jwt.SigningMethodES256, ecKeys()["P256"], goodClaims("acme.eu"))
		id, err := esExtractor(t).Extract(bearerRequest(t, tok))
		wantID(t, id, err, "acme.eu")
	})
	t.Run("configured claim", func(t *testing.T) {
		x := hsExtractor(t, func(c *JWTConfig) { c.Claim = "org" })
		claims := goodClaims("ignored")
		claims["org"] = "acme"
		id, err := x.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims)))
		wantID(t, id, err, "acme")
	})
	t.Run("scheme case-insensitive", func(t *testing.T) {
		tok := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme"))
		r := newRequest(t)
		r.Header.Set("Authorization", "bearer "+tok)
		id, err := hsExtractor(t, nil).Extract(r)
		wantID(t, id, err, "acme")
	})
	t.Run("issuer and audience", func(t *testing.T) {
		x := hsExtractor(t, func(c *JWTConfig) { c.Issuer, c.Audience = "https://idp", "cellgate" })
		claims := goodClaims("acme")
		claims["iss"], claims["aud"] = "https://idp", []string{"other", "cellgate"}
		id, err := x.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims)))
		wantID(t, id, err, "acme")
		claims["iss"] = "https://evil"
		id, err = x.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims)))
		wantKind(t, id, err, KindUnauthenticated)
		claims["iss"], claims["aud"] = "https://idp", "other"
		id, err = x.Extract(bearerRequest(t, mint(t, jwt.SigningMethodHS256, testHMACKey, claims)))
		wantKind(t, id, err, KindUnauthenticated)
	})
}

// rawToken assembles a token from a header and claims JSON and a signature
// made by sign over "header.claims" (nil: empty signature).
func rawToken(header, claims string, sign func(string) []byte) string {
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	var sig []byte
	if sign != nil {
		sig = sign(s)
	}
	return s + "." + enc.EncodeToString(sig)
}

func TestJWTRejections(t *testing.T) {
	exp := testNow.Add(time.Hour).Unix()
	rsaPEM := pemPublic(t, &rsaKeys()[0].PublicKey)
	noneTok, err := jwt.NewWithClaims(jwt.SigningMethodNone, goodClaims("acme")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name  string
		x     func(testing.TB) Extractor
		token string
		kind  Kind
	}{
		{"alg none vs HS256", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) }, noneTok, KindUnauthenticated},
		{"alg none vs RS256", rsExtractor, noneTok, KindUnauthenticated},
		{"alg None spelled oddly", rsExtractor,
			rawToken(`{"alg":"None","typ":"JWT"}`, `{"tenant":"acme","exp":9999999999}`, nil), KindUnauthenticated},
		{"HS256 token, RS256 allowed", rsExtractor,
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme")), KindUnauthenticated},
		// The classic key confusion: an attacker signs HS256 with the
		// server's public RSA key (which is public) as the HMAC secret.
		{"RS->HS key confusion", rsExtractor,
			mint(t, jwt.SigningMethodHS256, rsaPEM, goodClaims("acme")), KindUnauthenticated},
		{"RS256 token, HS256 allowed", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodRS256, rsaKeys()[0], goodClaims("acme")), KindUnauthenticated},
		{"ES256 token, RS256 allowed", rsExtractor,
			mint(t, jwt.SigningMethodES256, ecKeys()["P256"], goodClaims("acme")), KindUnauthenticated},
		{"HS512 token, HS256 allowed", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS512, testHMACKey, goodClaims("acme")), KindUnauthenticated},
		{"wrong HMAC key", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, []byte("not-the-key-not-the-key-not-the-"), goodClaims("acme")), KindUnauthenticated},
		{"wrong RSA key", rsExtractor,
			mint(t, jwt.SigningMethodRS256, rsaKeys()[1], goodClaims("acme")), KindUnauthenticated},
		{"wrong ECDSA key", esExtractor,
			mint(t, jwt.SigningMethodES256, ecKeys()["P256b"], goodClaims("acme")), KindUnauthenticated},
		{"expired", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"tenant": "acme", "exp": testNow.Add(-time.Second).Unix()}), KindUnauthenticated},
		{"exp missing", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"tenant": "acme"}), KindUnauthenticated},
		{"exp not a number", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"tenant": "acme", "exp": "tomorrow"}), KindUnauthenticated},
		{"nbf in the future", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"tenant": "acme", "exp": exp, "nbf": testNow.Add(time.Minute).Unix()}), KindUnauthenticated},
		{"claim missing", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"sub": "acme", "exp": exp}), KindUnauthenticated},
		{"claim number", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(42)), KindUnauthenticated},
		{"claim array", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims([]string{"acme"})), KindUnauthenticated},
		{"claim object", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(map[string]string{"id": "acme"})), KindUnauthenticated},
		{"claim bool", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(true)), KindUnauthenticated},
		{"claim null", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(nil)), KindUnauthenticated},
		{"claim empty", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("")), KindUnauthenticated},
		{"claim malformed id", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme/../x")), KindInvalid},
		{"claim too long", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims(strings.Repeat("a", 65))), KindInvalid},
		{"signature stripped", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) },
			func() string {
				tok := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme"))
				return tok[:strings.LastIndexByte(tok, '.')+1]
			}(), KindUnauthenticated},
		{"garbage", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) }, "not.a.token", KindUnauthenticated},
		{"too long", func(tb testing.TB) Extractor { return hsExtractor(tb, nil) }, strings.Repeat("a", maxToken+1), KindUnauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.x(t).Extract(bearerRequest(t, tc.token))
			wantKind(t, id, err, tc.kind)
		})
	}
}

func TestJWTLeeway(t *testing.T) {
	expired := mint(t, jwt.SigningMethodHS256, testHMACKey,
		jwt.MapClaims{"tenant": "acme", "exp": testNow.Add(-30 * time.Second).Unix()})
	early := mint(t, jwt.SigningMethodHS256, testHMACKey,
		jwt.MapClaims{"tenant": "acme", "exp": testNow.Add(time.Hour).Unix(), "nbf": testNow.Add(30 * time.Second).Unix()})

	strict := hsExtractor(t, nil)
	lenient := hsExtractor(t, func(c *JWTConfig) { c.Leeway = time.Minute })
	for _, tok := range []string{expired, early} {
		id, err := strict.Extract(bearerRequest(t, tok))
		wantKind(t, id, err, KindUnauthenticated)
		id, err = lenient.Extract(bearerRequest(t, tok))
		wantID(t, id, err, "acme")
	}
}

func TestJWTAuthorizationHeader(t *testing.T) {
	x := hsExtractor(t, nil)
	tok := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme"))

	id, err := x.Extract(newRequest(t))
	wantKind(t, id, err, KindMissing)

	for _, v := range []string{"Basic YWxhZGRpbjpvcGVu", "Bearer", "Bearer ", "Bearer  ", tok, "Bearer " + tok + " extra", "Token " + tok} {
		r := newRequest(t)
		r.Header.Set("Authorization", v)
		id, err := x.Extract(r)
		wantKind(t, id, err, KindUnauthenticated)
	}

	r := bearerRequest(t, tok)
	r.Header.Add("Authorization", "Bearer "+tok)
	id, err = x.Extract(r)
	wantKind(t, id, err, KindUnauthenticated)
}

func TestJWTErrorKeepsCauseButNotInReason(t *testing.T) {
	tok := mint(t, jwt.SigningMethodHS256, testHMACKey, jwt.MapClaims{"tenant": "acme", "exp": testNow.Add(-time.Hour).Unix()})
	id, err := hsExtractor(t, nil).Extract(bearerRequest(t, tok))
	e := wantKind(t, id, err, KindUnauthenticated)
	if e.Reason != "token expired" {
		t.Errorf("Reason = %q, want %q", e.Reason, "token expired")
	}
	if e.Err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("cause lost: %v", err)
	}
}
