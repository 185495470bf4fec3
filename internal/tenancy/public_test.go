package tenancy

import (
	"net/http/httptest"
	"testing"

	"github.com/cellgate/cellgate/internal/probe"
)

func TestPublicPaths(t *testing.T) {
	p, err := NewPublicPaths("/login", "/public/*", "/docs/v1/*")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{
		"/healthz": true, "/readyz": true, "/metrics": true,
		"/login": true, "/public/": true, "/public/a/b.js": true, "/docs/v1/x": true,
		"/healthz/": false, "/healthzz": false, "/metrics/x": false, "/HEALTHZ": false,
		"/login/": false, "/public": false, "/publicity": false, "/docs/v2/x": false,
		"/public/../admin": false, "/public/./x": false, "/public/..": false,
		"/public/%2e%2e/admin": false, "/public/%2E./admin": false, "/public/.../x": false,
		"/public/a..b": true, "/public/.well-known": true, "": false, "/": false,
	}
	for path, want := range cases {
		if got := p.Match(path); got != want {
			t.Errorf("Match(%q) = %v, want %v", path, got, want)
		}
	}

	// MatchRequest uses the path Echo routes on: the escaped form when the
	// request has one, so "/public%2Fx" is not under "/public/".
	r := httptest.NewRequest("GET", "/public%2Fx", nil)
	if p.MatchRequest(r) {
		t.Errorf("MatchRequest(%q) = true", r.URL.RawPath)
	}
	r = httptest.NewRequest("GET", "/public/a%20b", nil)
	if !p.MatchRequest(r) {
		t.Errorf("MatchRequest(/public/a%%20b) = false")
	}

	// Probes are always there.
	p, err = NewPublicPaths()
	if err != nil || !p.Match("/healthz") || p.Match("/login") {
		t.Fatalf("empty set: %v", err)
	}
	for _, pp := range probe.Paths() {
		if !p.Match(pp) {
			t.Errorf("probe %s is not public", pp)
		}
	}
}

func TestPublicPathsRejectsBadPatterns(t *testing.T) {
	for _, bad := range []string{"login", "", "*", "/pub*", "/a/*/b", "/a/**", "/a/../b", "/./x/*"} {
		if _, err := NewPublicPaths(bad); err == nil {
			t.Errorf("NewPublicPaths(%q) accepted", bad)
		}
	}
}
