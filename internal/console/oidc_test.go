package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoleauth/oidctest"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// oidcLogin logs b in through the provider (following every redirect) and
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

// sessionOf is b's console session cookie for base.
func sessionOf(t *testing.T, b *http.Client, base string) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(base + "/admin/")
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == console.SessionCookie {
			return c
		}
	}
	return nil
}

// A person logs in to the cell's console through the OpenID provider: the
// groups claim gives the role, every audit line of the session (login,
// action, logout) names the person, the session is in the control
// database (another process accepts it), and after logout the saved
// cookie is refused everywhere.
func TestOIDCLoginCell(t *testing.T) {
	t.Parallel()
	p := oidctest.New(t)
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) { c.OIDC = p.Config() }})
	ids := env.Seed("shard-0", consoletest.Job{Kind: "k", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5})
	other := env.Another()

	if _, body := send(t, "GET", env.URL+"/admin/login", nil, nil, nil); !strings.Contains(body, `href="/admin/oidc/login"`) {
		t.Errorf("the login page offers no OpenID login:\n%s", body)
	}
	b := oidctest.Browser(t)
	if st, body := oidcLogin(t, b, env.URL); st != http.StatusOK || !strings.Contains(body, `url=/admin/`) {
		t.Fatalf("OpenID login = %d %s", st, body)
	}
	ck := sessionOf(t, b, env.URL)
	if ck == nil {
		t.Fatal("no session cookie after the OpenID login")
	}
	_, page := send(t, "GET", env.URL+"/admin/", ck, nil, nil)
	m := csrfRe.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "operator") {
		t.Fatalf("the overview after the OpenID login shows no operator session:\n%s", page)
	}
	csrf := m[1]
	job := "/admin/jobs/shard-0/" + itoa(ids[0])
	if resp, _ := send(t, "POST", other+job+"/retry", ck, url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the person's retry at another process = %d", resp.StatusCode)
	}
	if resp, _ := send(t, "POST", env.URL+"/admin/logout", ck, url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d", resp.StatusCode)
	}
	for _, base := range []string{env.URL, other} {
		if resp, _ := send(t, "GET", base+"/admin/api/jobs", ck, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: replayed cookie after logout = %d, want 401", base, resp.StatusCode)
		}
	}
	audit := env.Audit.String()
	for _, action := range []string{"action=login outcome=ok", "action=retry", "action=logout outcome=ok"} {
		found := false
		for _, line := range strings.Split(audit, "\n") {
			if strings.Contains(line, action) {
				found = true
				if !strings.Contains(line, "actor=oidc:alice") || !strings.Contains(line, "email=alice@example.com") || !strings.Contains(line, "role=operator") {
					t.Errorf("the audit line of %q does not name the person: %s", action, line)
				}
			}
		}
		if !found {
			t.Errorf("no audit line with %q in:\n%s", action, audit)
		}
	}

	// A reader sees, cannot act; a person without a mapped group is refused.
	p.SetPerson(map[string]any{"sub": "bob", "email": "bob@example.com", "groups": []string{oidctest.ReaderGroup}})
	b = oidctest.Browser(t)
	if st, _ := oidcLogin(t, b, env.URL); st != http.StatusOK {
		t.Fatalf("reader's OpenID login = %d", st)
	}
	ck = sessionOf(t, b, env.URL)
	_, page = send(t, "GET", env.URL+"/admin/", ck, nil, nil)
	m = csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token for the reader:\n%s", page)
	}
	if resp, _ := send(t, "POST", env.URL+job+"/retry", ck, url.Values{"csrf": {m[1]}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the reader's retry = %d, want 403", resp.StatusCode)
	}
	p.SetPerson(map[string]any{"sub": "mallory", "email": "mallory@example.com", "groups": []string{"staff"}})
	b = oidctest.Browser(t)
	if st, _ := oidcLogin(t, b, env.URL); st != http.StatusForbidden {
		t.Errorf("a person without a mapped group = %d, want 403", st)
	}
	if sessionOf(t, b, env.URL) != nil {
		t.Error("a refused person got a session cookie")
	}
	if !strings.Contains(env.Audit.String(), `actor=oidc:mallory remote=127.0.0.1 email=mallory@example.com action=login outcome="refused: oidc_no_role"`) {
		t.Errorf("the refused person is not audited by name:\n%s", env.Audit.String())
	}
}
