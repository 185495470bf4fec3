package runtime

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/promtest"
	"github.com/cellgate/cellgate/internal/shards"
)

// TestJWKSURLServer: a cell with tenancy.jwt.jwks_url verifies tokens with
// the provider's keys, refuses a foreign issuer or audience with 401, and
// while the provider is down stays ready, says so under /readyz "details"
// and in cellgate_tenancy_jwks_stale, and keeps verifying known keys.
func TestJWKSURLServer(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	doc, err := json.Marshal(map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(doc)
	}))
	defer idp.Close()

	cfg := testConfig()
	cfg.Tenancy.Source = "jwt"
	cfg.Tenancy.JWT = config.JWTSource{
		Algorithms: []string{"RS256"}, Claim: "tenant", JWKSURL: idp.URL + "/jwks",
		JWKSRefresh: config.Duration(time.Hour), JWKSUnknownKIDInterval: config.Duration(time.Nanosecond),
		JWKSTimeout: config.Duration(5 * time.Second), Issuer: "https://id.example.com/", Audience: "cellgate",
	}
	reg := prometheus.NewRegistry()
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: reg, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range s.closers {
			_ = c()
		}
	}()
	s.Tenant("GET", "/me", func(c echo.Context, sh shards.Accessor) error {
		return c.String(http.StatusOK, sh.Tenant())
	})
	token := func(kid, iss, aud string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"tenant": "acme", "iss": iss, "aud": aud, "exp": time.Now().Add(time.Hour).Unix(),
		})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	good := token("k1", "https://id.example.com/", "cellgate")
	if rec := serve(s, "GET", "/me", "", "Authorization", good); rec.Code != http.StatusOK || rec.Body.String() != "acme" {
		t.Fatalf("good token: %d %s", rec.Code, rec.Body)
	}
	for name, tok := range map[string]string{
		"issuer":   token("k1", "https://evil.example.com/", "cellgate"),
		"audience": token("k1", "https://id.example.com/", "other"),
	} {
		if rec := serve(s, "GET", "/me", "", "Authorization", tok); rec.Code != http.StatusUnauthorized {
			t.Fatalf("foreign %s: %d %s", name, rec.Code, rec.Body)
		}
	}
	if rec := serve(s, "GET", "/readyz", ""); rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "details") {
		t.Fatalf("readyz with a fresh key set: %d %s", rec.Code, rec.Body)
	}

	down.Store(true)
	// An unknown kid fetches (the interval is 1ns), and the fetch fails.
	if rec := serve(s, "GET", "/me", "", "Authorization", token("k2", "https://id.example.com/", "cellgate")); rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown kid: %d", rec.Code)
	}
	if rec := serve(s, "GET", "/me", "", "Authorization", good); rec.Code != http.StatusOK {
		t.Fatalf("known key with the provider down: %d %s", rec.Code, rec.Body)
	}
	rec := serve(s, "GET", "/readyz", "")
	var body struct {
		Status  string            `json:"status"`
		Details map[string]string `json:"details"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if d := body.Details["tenancy.jwt.jwks_url"]; rec.Code != http.StatusOK || body.Status != "ready" ||
		!strings.HasPrefix(d, "stale: the last fetch of "+idp.URL+"/jwks failed at ") || !strings.Contains(d, "503") {
		t.Fatalf("readyz with the provider down: %d %s", rec.Code, rec.Body)
	}
	if got := promtest.Value(t, reg, "cellgate_tenancy_jwks_stale"); got != 1 {
		t.Fatalf("cellgate_tenancy_jwks_stale = %v, want 1", got)
	}
}
