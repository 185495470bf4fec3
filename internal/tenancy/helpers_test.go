package tenancy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testNow is the fixed clock of every test: a whole second, so that session
// expiries (whole seconds) line up exactly.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedClock() time.Time { return testNow }

// testSessionKey and testHMACKey are 32-byte keys made for the tests.
var (
	testSessionKey = []byte("0123456789abcdef0123456789abcdef")
	testHMACKey    = []byte("hmac-secret-for-tests-32-bytes!!")
)

// Keys are generated once per test binary: RSA generation is slow under -race.
var (
	rsaKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
		var ks [2]*rsa.PrivateKey
		for i := range ks {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			ks[i] = k
		}
		return ks
	})
	ecKeys = sync.OnceValue(func() map[string]*ecdsa.PrivateKey {
		m := map[string]*ecdsa.PrivateKey{}
		for name, c := range map[string]elliptic.Curve{"P256": elliptic.P256(), "P256b": elliptic.P256(), "P384": elliptic.P384()} {
			k, err := ecdsa.GenerateKey(c, rand.Reader)
			if err != nil {
				panic(err)
			}
			m[name] = k
		}
		return m
	})
)

// pemPublic encodes pub as a PKIX "PUBLIC KEY" PEM block.
func pemPublic(tb testing.TB, pub any) []byte {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// mint signs claims with method and key.
func mint(tb testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// goodClaims returns claims for tenant that are valid at testNow.
func goodClaims(tenant any) jwt.MapClaims {
	return jwt.MapClaims{
		"tenant": tenant,
		"exp":    testNow.Add(time.Hour).Unix(),
		"iat":    testNow.Add(-time.Minute).Unix(),
	}
}

func newExtractorT(tb testing.TB, cfg Config) Extractor {
	tb.Helper()
	if cfg.Now == nil {
		cfg.Now = fixedClock
	}
	x, err := NewExtractor(cfg)
	if err != nil {
		tb.Fatalf("NewExtractor: %v", err)
	}
	return x
}

func newRequest(tb testing.TB) *http.Request {
	tb.Helper()
	return httptest.NewRequest(http.MethodGet, "http://api.example.com/orders", nil)
}

func bearerRequest(tb testing.TB, token string) *http.Request {
	tb.Helper()
	r := newRequest(tb)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// wantID fails unless extraction succeeded with id.
func wantID(tb testing.TB, gotID string, err error, id string) {
	tb.Helper()
	if err != nil || gotID != id {
		tb.Fatalf("got (%q, %v), want (%q, nil)", gotID, err, id)
	}
}

// wantKind fails unless err is an *Error of kind k that also matches k's
// sentinel, and no id came with it.
func wantKind(tb testing.TB, gotID string, err error, k Kind) *Error {
	tb.Helper()
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("got (%q, %v), want an *Error of %s", gotID, err, k)
	}
	if e.Kind != k {
		tb.Fatalf("got kind %s (%v), want %s", e.Kind, err, k)
	}
	sentinel := map[Kind]error{KindMissing: ErrMissing, KindInvalid: ErrInvalid, KindUnauthenticated: ErrUnauthenticated}[k]
	if !errors.Is(err, sentinel) {
		tb.Fatalf("errors.Is(%v, %v) = false", err, sentinel)
	}
	if gotID != "" {
		tb.Fatalf("an error came with id %q", gotID)
	}
	return e
}

// checkOutcome is the property every fuzz test asserts: the result is either
// a typed error and no id, or a valid id and no error.
func checkOutcome(tb testing.TB, id string, err error, maxLen int) {
	tb.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Kind < KindMissing || e.Kind > KindUnauthenticated {
			tb.Fatalf("untyped error %v", err)
		}
		if id != "" {
			tb.Fatalf("error %v came with id %q", err, id)
		}
		return
	}
	if verr := ValidateID(id, maxLen); verr != nil {
		tb.Fatalf("returned invalid id %q: %v", id, verr)
	}
}
