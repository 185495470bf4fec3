package tenancy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func sessionExtractor(tb testing.TB) Extractor {
	tb.Helper()
	return newExtractorT(tb, Config{Source: SourceSession, Session: SessionConfig{Key: testSessionKey}})
}

func cookieRequest(tb testing.TB, name, value string) *http.Request {
	tb.Helper()
	r := newRequest(tb)
	r.AddCookie(&http.Cookie{Name: name, Value: value})
	return r
}

func TestSessionHappyPath(t *testing.T) {
	x := sessionExtractor(t)
	v := SignSession(testSessionKey, "Acme.eu", testNow.Add(time.Hour))
	id, err := x.Extract(cookieRequest(t, DefaultSessionCookie, v))
	wantID(t, id, err, "Acme.eu")

	// Among other cookies, and under a configured name.
	x = newExtractorT(t, Config{Source: SourceSession, Session: SessionConfig{Cookie: "sid", Key: testSessionKey}})
	r := newRequest(t)
	r.Header.Set("Cookie", "theme=dark; sid="+v+"; lang=en")
	id, err = x.Extract(r)
	wantID(t, id, err, "Acme.eu")
}

func TestSessionFormat(t *testing.T) {
	// The documented format: v1.<expiry>.<b64url tenant>.<b64url mac>.
	v := SignSession(testSessionKey, "acme", time.Unix(1893456000, 0))
	parts := strings.Split(v, ".")
	if len(parts) != 4 || parts[0] != "v1" || parts[1] != "1893456000" || parts[2] != "YWNtZQ" || len(parts[3]) != 43 {
		t.Fatalf("SignSession = %q, want v1.1893456000.YWNtZQ.<43-char mac>", v)
	}
	// Deterministic: same inputs, same cookie; the key matters.
	if v2 := SignSession(testSessionKey, "acme", time.Unix(1893456000, 0)); v2 != v {
		t.Fatalf("not deterministic: %q vs %q", v, v2)
	}
	if v3 := SignSession([]byte(strings.Repeat("k", 32)), "acme", time.Unix(1893456000, 0)); v3 == v {
		t.Fatal("different keys gave the same cookie")
	}
}

func TestSessionRejections(t *testing.T) {
	x := sessionExtractor(t)
	good := SignSession(testSessionKey, "acme", testNow.Add(time.Hour))
	parts := strings.Split(good, ".")
	otherTenant := SignSession(testSessionKey, "other", testNow.Add(time.Hour))
	otherParts := strings.Split(otherTenant, ".")
	flip := func(s string, i int) string { // change one character of s
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}

	cases := []struct {
		name  string
		value string
		kind  Kind
	}{
		{"tampered tenant", strings.Join([]string{parts[0], parts[1], otherParts[2], parts[3]}, "."), KindUnauthenticated},
		{"tampered expiry", strings.Join([]string{parts[0], "9999999999", parts[2], parts[3]}, "."), KindUnauthenticated},
		{"tampered mac", strings.Join([]string{parts[0], parts[1], parts[2], flip(parts[3], 5)}, "."), KindUnauthenticated},
		{"wrong key", SignSession([]byte("another-key-of-32-bytes-length!!"), "acme", testNow.Add(time.Hour)), KindUnauthenticated},
		{"empty key", SignSession(nil, "acme", testNow.Add(time.Hour)), KindUnauthenticated},
		{"expired", SignSession(testSessionKey, "acme", testNow.Add(-time.Second)), KindUnauthenticated},
		{"expires now", SignSession(testSessionKey, "acme", testNow), KindUnauthenticated},
		{"before 1970", SignSession(testSessionKey, "acme", time.Unix(-5, 0)), KindUnauthenticated},
		{"no version", strings.Join(parts[1:], "."), KindUnauthenticated},
		{"version 2", "v2." + strings.Join(parts[1:], "."), KindUnauthenticated},
		{"truncated", good[:len(good)-1], KindUnauthenticated},
		{"mac only", parts[3], KindUnauthenticated},
		{"garbage", "hello", KindUnauthenticated},
		{"too long", good + strings.Repeat("A", 600), KindUnauthenticated},
		{"extra dot in tenant", strings.Join([]string{parts[0], parts[1], parts[2] + ".x", parts[3]}, "."), KindUnauthenticated},
		{"signed bad id", SignSession(testSessionKey, "ac me", testNow.Add(time.Hour)), KindInvalid},
		{"signed empty id", SignSession(testSessionKey, "", testNow.Add(time.Hour)), KindInvalid},
		{"signed long id", SignSession(testSessionKey, strings.Repeat("a", 65), testNow.Add(time.Hour)), KindInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := x.Extract(cookieRequest(t, DefaultSessionCookie, tc.value))
			wantKind(t, id, err, tc.kind)
		})
	}

	t.Run("repeated", func(t *testing.T) {
		r := cookieRequest(t, DefaultSessionCookie, good)
		r.AddCookie(&http.Cookie{Name: DefaultSessionCookie, Value: otherTenant})
		id, err := x.Extract(r)
		wantKind(t, id, err, KindUnauthenticated)
	})

	t.Run("missing", func(t *testing.T) {
		id, err := x.Extract(newRequest(t))
		wantKind(t, id, err, KindMissing)
		id, err = x.Extract(cookieRequest(t, "other", good))
		wantKind(t, id, err, KindMissing)
		id, err = x.Extract(cookieRequest(t, DefaultSessionCookie, ""))
		wantKind(t, id, err, KindMissing)
	})
}

// A MAC whose base64 text differs only in its unused trailing bits decodes to
// the same bytes under a lenient decoder; the strict one must refuse it so
// each session has exactly one valid encoding.
func TestSessionMACEncodingIsCanonical(t *testing.T) {
	x := sessionExtractor(t)
	good := SignSession(testSessionKey, "acme", testNow.Add(time.Hour))
	last := good[len(good)-1]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	idx := strings.IndexByte(alphabet, last)
	// 32 bytes = 256 bits; 43 chars carry 258, so the last char's low 2 bits
	// are padding. Setting one of them gives the same bytes, non-canonically.
	alt := good[:len(good)-1] + string(alphabet[idx^1])
	id, err := x.Extract(cookieRequest(t, DefaultSessionCookie, alt))
	wantKind(t, id, err, KindUnauthenticated)
}

// The documented format, checked against a vector computed independently
// (Python's hmac/hashlib/base64 from the description in docs/tenancy.md), so
// the doc and the code cannot drift apart.
func TestSessionIndependentVector(t *testing.T) {
	const vector = "v1.1893557045.YWNtZQ.fYHle9xM2LAWllxnW6_KphkqUjAZCxkVFCZV5WpBXvE"
	if got := SignSession(testSessionKey, "acme", testNow.Add(time.Hour)); got != vector {
		t.Fatalf("SignSession = %q, want %q", got, vector)
	}
	id, err := sessionExtractor(t).Extract(cookieRequest(t, DefaultSessionCookie, vector))
	wantID(t, id, err, "acme")
}
