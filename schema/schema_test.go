package schema

import (
	"strings"
	"testing"
)

func TestLoadTheAppSpec(t *testing.T) {
	raw, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(raw); err != nil {
		t.Fatalf("the exported app spec does not pass Check: %v", err)
	}
}

func TestCheckNamesThePath(t *testing.T) {
	raw, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), `"workers":4`, `"workers":0`, 1)
	if bad == string(raw) {
		t.Fatal(`fixture: the app spec no longer has "workers":4`)
	}
	err = Check([]byte(bad))
	if err == nil || !strings.Contains(err.Error(), "jobs.workers") {
		t.Fatalf("err = %v, want one naming jobs.workers", err)
	}
}

func TestLoadReportsFileAndLine(t *testing.T) {
	_, err := Load(appDir(t, "package cellgate\n\nconfig: #Config & {\n\tserver: body_limit_bytes: 0\n\troutes: []\n}\n"))
	if err == nil || !strings.Contains(err.Error(), "server.body_limit_bytes") || !strings.Contains(err.Error(), "app.cue:4") {
		t.Fatalf("err = %v, want one naming server.body_limit_bytes at app.cue:4", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .cue files") {
		t.Fatalf("empty dir: %v", err)
	}
}

// console.oidc: an issuer or redirect URL that is not an http(s) URL, an
// empty role claim and a secret variable that is no variable name are
// refused, naming the field; a good block passes.
func TestCheckConsoleOIDC(t *testing.T) {
	raw, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	const from = `"issuer":""`
	if !strings.Contains(string(raw), from) {
		t.Fatalf("fixture: the app spec no longer has %s", from)
	}
	good := strings.Replace(string(raw), from, `"issuer":"https://sso.example.com/realms/ops"`, 1)
	if err := Check([]byte(good)); err != nil {
		t.Errorf("a good issuer: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{from, `"issuer":"sso.example.com"`, "console.oidc.issuer"},
		{from, `"issuer":"https://sso.example.com/?a=1"`, "console.oidc.issuer"},
		{`"redirect_url":""`, `"redirect_url":"/admin/oidc/callback"`, "console.oidc.redirect_url"},
		{`"role_claim":"groups"`, `"role_claim":""`, "console.oidc.role_claim"},
		{`"client_secret_env":"CELLGATE_CONSOLE_OIDC_CLIENT_SECRET"`, `"client_secret_env":"not a var"`, "console.oidc.client_secret_env"},
	} {
		bad := strings.Replace(string(raw), c.from, c.to, 1)
		if bad == string(raw) {
			t.Fatalf("fixture: the app spec no longer has %s", c.from)
		}
		if err := Check([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %s", c.to, err, c.want)
		}
	}
}
