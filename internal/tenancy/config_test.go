package tenancy

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pemPublic(t, &rsaKeys()[0].PublicKey)
	p256PEM := pemPublic(t, &ecKeys()["P256"].PublicKey)
	jwtCfg := func(c JWTConfig) Config { return Config{Source: SourceJWT, JWT: c} }

	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"unknown source", Config{Source: "cookie"}, "Source"},
		{"bad header", Config{Header: "X Tenant"}, "Header"},
		{"header with colon", Config{Header: "X-Tenant:"}, "Header"},
		{"negative max", Config{MaxIDLength: -1}, "MaxIDLength"},
		{"huge max", Config{MaxIDLength: 256}, "MaxIDLength"},
		{"no base domain", Config{Source: SourceSubdomain}, "BaseDomain"},
		{"dots only base", Config{Source: SourceSubdomain, BaseDomain: "..."}, "BaseDomain"},
		{"base with port", Config{Source: SourceSubdomain, BaseDomain: "example.com:80"}, "BaseDomain"},
		{"base with empty label", Config{Source: SourceSubdomain, BaseDomain: "example..com"}, "BaseDomain"},
		{"no session key", Config{Source: SourceSession}, "Session.Key"},
		{"short session key", Config{Source: SourceSession, Session: SessionConfig{Key: []byte("short")}}, "Session.Key"},
		{"bad cookie name", Config{Source: SourceSession, Session: SessionConfig{Cookie: "a;b", Key: testSessionKey}}, "Session.Cookie"},
		{"no algorithms", jwtCfg(JWTConfig{Key: testHMACKey}), "JWT.Algorithms"},
		{"alg none", jwtCfg(JWTConfig{Algorithms: []string{"none"}, Key: testHMACKey}), "JWT.Algorithms"},
		{"alg lower case", jwtCfg(JWTConfig{Algorithms: []string{"hs256"}, Key: testHMACKey}), "JWT.Algorithms"},
		{"mixed HS and RS", jwtCfg(JWTConfig{Algorithms: []string{"RS256", "HS256"}, Key: rsaPEM}), "JWT.Algorithms"},
		{"mixed RS and ES", jwtCfg(JWTConfig{Algorithms: []string{"RS256", "ES256"}, Key: rsaPEM}), "JWT.Algorithms"},
		{"no key", jwtCfg(JWTConfig{Algorithms: []string{"HS256"}}), "JWT.Key"},
		{"short HMAC key", jwtCfg(JWTConfig{Algorithms: []string{"HS256"}, Key: []byte("secret")}), "JWT.Key"},
		{"HS512 needs 64 bytes", jwtCfg(JWTConfig{Algorithms: []string{"HS256", "HS512"}, Key: testHMACKey}), "JWT.Key"},
		{"PEM as HMAC secret", jwtCfg(JWTConfig{Algorithms: []string{"HS256"}, Key: rsaPEM}), "JWT.Key"},
		{"RSA key not PEM", jwtCfg(JWTConfig{Algorithms: []string{"RS256"}, Key: testHMACKey}), "JWT.Key"},
		{"ECDSA key for RS256", jwtCfg(JWTConfig{Algorithms: []string{"RS256"}, Key: p256PEM}), "JWT.Key"},
		{"RSA key for ES256", jwtCfg(JWTConfig{Algorithms: []string{"ES256"}, Key: rsaPEM}), "JWT.Key"},
		{"small RSA key", jwtCfg(JWTConfig{Algorithms: []string{"RS256"}, Key: pemPublic(t, &smallRSA.PublicKey)}), "JWT.Key"},
		{"curve mismatch", jwtCfg(JWTConfig{Algorithms: []string{"ES384"}, Key: p256PEM}), "JWT.Key"},
		{"negative leeway", jwtCfg(JWTConfig{Algorithms: []string{"HS256"}, Key: testHMACKey, Leeway: -time.Second}), "JWT.Leeway"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for name, build := range map[string]func(Config) error{
				"NewExtractor": func(c Config) error { _, err := NewExtractor(c); return err },
			} {
				err := build(tc.cfg)
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("%s: got %v, want a *ConfigError", name, err)
				}
				if ce.Field != tc.field {
					t.Fatalf("%s: field %q (%v), want %q", name, ce.Field, err, tc.field)
				}
				if !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("%s: message %q does not name %s", name, err, tc.field)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := withDefaults(Config{})
	if c.Source != SourceHeader || c.Header != "X-Tenant-ID" || c.MaxIDLength != 64 ||
		c.Session.Cookie != "cellgate_tenant" || c.JWT.Claim != "tenant" ||
		c.Now == nil || c.JWT.Leeway != 0 {
		t.Fatalf("defaults not applied: %+v", c)
	}
	// Set fields are kept.
	c = withDefaults(Config{Source: SourceJWT, Header: "X-Org", MaxIDLength: 8, JWT: JWTConfig{Claim: "org"}})
	if c.Source != SourceJWT || c.Header != "X-Org" || c.MaxIDLength != 8 || c.JWT.Claim != "org" {
		t.Fatalf("set fields overwritten: %+v", c)
	}
	// A zero Config is usable.
	if _, err := NewExtractor(Config{}); err != nil {
		t.Fatalf("NewExtractor(Config{}): %v", err)
	}
	if _, err := NewExtractor(DefaultConfig); err != nil {
		t.Fatalf("NewExtractor(DefaultConfig): %v", err)
	}
}

func TestKeysAreCopied(t *testing.T) {
	key := append([]byte(nil), testSessionKey...)
	x := newExtractorT(t, Config{Source: SourceSession, Session: SessionConfig{Key: key}})
	v := SignSession(testSessionKey, "acme", testNow.Add(time.Hour))
	clear(key) // the caller wipes its buffer after configuring
	id, err := x.Extract(cookieRequest(t, DefaultSessionCookie, v))
	wantID(t, id, err, "acme")
}

func TestSources(t *testing.T) {
	for _, s := range []string{"header", "subdomain", "session", "jwt"} {
		src, err := ParseSource(s)
		if err != nil || string(src) != s {
			t.Errorf("ParseSource(%q) = %q, %v", s, src, err)
		}
	}
	for _, s := range []string{"", "Header", "cookie"} {
		if _, err := ParseSource(s); err == nil {
			t.Errorf("ParseSource(%q) accepted", s)
		}
	}
}

func TestKindStatusAndCode(t *testing.T) {
	want := map[Kind][2]any{
		KindMissing:         {401, "tenant_missing"},
		KindInvalid:         {400, "tenant_invalid"},
		KindUnauthenticated: {401, "tenant_unauthenticated"},
	}
	for k, w := range want {
		if k.Status() != w[0] || k.Code() != w[1] || k.String() != w[1] {
			t.Errorf("%d: status %d code %q", k, k.Status(), k.Code())
		}
	}
}
