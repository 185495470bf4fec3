package routerconsole

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/console/consoleauth/oidctest"
)

// oidcLogin logs b in through the provider, following every redirect, and
// returns the final answer's status and body.
func oidcLogin(t *testing.T, b *http.Client, base string) (int, string) {
	t.Helper()
	resp, err := b.Get(base + "/admin/oidc/login")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func sessionOf(b *http.Client, base string) *http.Cookie {
	u, _ := url.Parse(base + "/admin/")
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == SessionCookie {
			return c
		}
	}
	return nil
}

// auditLine returns the audit line that has every one of parts, or "".
func auditLine(log string, parts ...string) string {
next:
	for _, line := range strings.Split(log, "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		return line
	}
	return ""
}

// A person logs in to the router's console through the OpenID provider;
// the audit names them at login and logout; the saved cookie is refused
// after logout; a login after the provider rotated its key works (the key
// set is fetched again).
func TestOIDCLoginRouter(t *testing.T) {
	p := oidctest.New(t)
	e := newEnv(t, func(c *Config) { c.OIDC = p.Config() })
	b := oidctest.Browser(t)
	if st, body := oidcLogin(t, b, e.srv.URL); st != http.StatusOK || !strings.Contains(body, "url=/admin/") {
		t.Fatalf("OpenID login = %d %s", st, body)
	}
	ck := sessionOf(b, e.srv.URL)
	if ck == nil {
		t.Fatal("no session cookie after the OpenID login")
	}
	resp, page := send(t, b, "GET", e.srv.URL+"/admin/", "", "")
	csrf := between(page, `name="csrf" value="`, `"`)
	if resp.StatusCode != 200 || csrf == "" {
		t.Fatalf("the overview after the OpenID login: %d\n%s", resp.StatusCode, page)
	}
	if l := auditLine(e.audit.String(), "action=login", "outcome=ok"); !strings.Contains(l, "role=operator actor=oidc:alice") || !strings.Contains(l, "email=alice@example.com") {
		t.Errorf("the login's audit line does not name the person: %q\n%s", l, e.audit)
	}
	if resp := withCookie(t, e, "POST", "/admin/logout", ck, "csrf="+url.QueryEscape(csrf)); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if l := auditLine(e.audit.String(), "action=logout"); !strings.Contains(l, "actor=oidc:alice") || !strings.Contains(l, "email=alice@example.com") {
		t.Errorf("the logout's audit line does not name the person: %q", l)
	}
	if resp := withCookie(t, e, "GET", "/admin/api/cells", ck, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replayed cookie after logout: %d, want 401", resp.StatusCode)
	}

	fetches := p.JWKSFetches()
	p.Rotate()
	p.SetPerson(map[string]any{"sub": "bob", "email": "bob@example.com", "groups": oidctest.ReaderGroup})
	b = oidctest.Browser(t)
	if st, body := oidcLogin(t, b, e.srv.URL); st != http.StatusOK {
		t.Fatalf("OpenID login after a key rotation = %d %s", st, body)
	}
	if p.JWKSFetches() <= fetches {
		t.Errorf("the rotated key was not fetched: %d fetches before, %d after", fetches, p.JWKSFetches())
	}
	if l := auditLine(e.audit.String(), "actor=oidc:bob", "action=login", "outcome=ok"); !strings.Contains(l, "role=read-only") {
		t.Errorf("a reader's login (a claim that is one string): %q\n%s", l, e.audit)
	}
}

// A callback whose state is not the login's, an ID token whose nonce is
// not the login's, a callback without the login's cookie and a person
// whose claims map to no role are refused, audited and given no session.
func TestOIDCRefusedRouter(t *testing.T) {
	p := oidctest.New(t)
	e := newEnv(t, func(c *Config) { c.OIDC = p.Config() })
	check := func(name string, want int, outcome string) {
		t.Helper()
		b := oidctest.Browser(t)
		if st, body := oidcLogin(t, b, e.srv.URL); st != want {
			t.Errorf("%s: %d, want %d\n%s", name, st, want, body)
		}
		if sessionOf(b, e.srv.URL) != nil {
			t.Errorf("%s: a session cookie was set", name)
		}
		if auditLine(e.audit.String(), "action=login", `outcome="refused: `+outcome+`"`) == "" {
			t.Errorf("%s: no audit line with outcome %s:\n%s", name, outcome, e.audit)
		}
	}
	p.ForgeState("another-login")
	check("foreign state", http.StatusBadRequest, "oidc_state")
	p.ForgeState("")
	p.ForgeNonce("replayed-nonce")
	check("wrong nonce", http.StatusUnauthorized, "oidc_nonce")
	if l := auditLine(e.audit.String(), "oidc_nonce"); !strings.Contains(l, "actor=oidc:alice") {
		t.Errorf("the nonce refusal does not name the person: %q", l)
	}
	p.ForgeNonce("")
	p.SetPerson(map[string]any{"sub": "mallory", "email": "mallory@example.com", "groups": []string{"staff"}})
	check("no mapped role", http.StatusForbidden, "oidc_no_role")
	if l := auditLine(e.audit.String(), "oidc_no_role"); !strings.Contains(l, "actor=oidc:mallory") || !strings.Contains(l, "email=mallory@example.com") {
		t.Errorf("the refused person is not named: %q", l)
	}
	p.SetPerson(map[string]any{"sub": "nogroups", "email": "n@example.com"})
	check("no role claim at all", http.StatusForbidden, "oidc_no_role")

	// A callback the browser did not start (no state cookie).
	resp, _ := send(t, e.client(t), "GET", e.srv.URL+"/admin/oidc/callback?code=x&state=y", "", "")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a callback without the login's cookie: %d, want 400", resp.StatusCode)
	}
}

// OpenID logins are not throttled: a source in backoff for wrong tokens
// still logs in through the provider.
func TestOIDCNotThrottled(t *testing.T) {
	p := oidctest.New(t)
	e := newEnv(t, func(c *Config) { c.OIDC = p.Config() })
	c := e.client(t)
	throttled := false
	for range 40 {
		if resp, _ := send(t, c, "POST", e.srv.URL+"/admin/login", "token=wrong", ""); resp.StatusCode == http.StatusTooManyRequests {
			throttled = true
			break
		}
	}
	if !throttled {
		t.Fatal("40 wrong tokens were never throttled")
	}
	if st, body := oidcLogin(t, oidctest.Browser(t), e.srv.URL); st != http.StatusOK {
		t.Errorf("an OpenID login from a throttled source = %d %s", st, body)
	}
}

// A provider that does not answer is a 503 on the login, not a crash; the
// token login still works.
func TestOIDCProviderDown(t *testing.T) {
	p := oidctest.New(t)
	cfg := p.Config()
	cfg.Issuer = "http://127.0.0.1:1"
	e := newEnv(t, func(c *Config) { c.OIDC = cfg })
	if st, _ := oidcLogin(t, oidctest.Browser(t), e.srv.URL); st != http.StatusServiceUnavailable {
		t.Errorf("login with the provider down = %d, want 503", st)
	}
	e.login(t)
}
