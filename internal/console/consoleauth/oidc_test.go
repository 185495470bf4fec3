package consoleauth_test

import (
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
)

// The spec's console.oidc block: off without an issuer; otherwise every
// field that cannot work is named, the empty secret variable included.
func TestOIDCFromSpec(t *testing.T) {
	good := config.ConsoleOIDC{
		Issuer: "https://id.example.com/realms/ops", ClientID: "cellgate", ClientSecretEnv: "OIDC_SECRET",
		RoleClaim: "groups", OperatorValues: []string{"ops"},
	}
	env := map[string]string{"OIDC_SECRET": "s3cret"}
	getenv := func(k string) string { return env[k] }
	if o, err := consoleauth.OIDCFromSpec(config.ConsoleOIDC{ClientSecretEnv: "OIDC_SECRET"}, getenv); o != nil || err != nil {
		t.Errorf("no issuer: %v, %v; want off", o, err)
	}
	o, err := consoleauth.OIDCFromSpec(good, getenv)
	if err != nil || o.ClientSecret != "s3cret" || o.Issuer != good.Issuer {
		t.Fatalf("good block: %+v, %v", o, err)
	}
	for _, c := range []struct {
		name string
		edit func(*config.ConsoleOIDC)
		want string
	}{
		{"issuer not a URL", func(c *config.ConsoleOIDC) { c.Issuer = "id.example.com" }, "console.oidc.issuer"},
		{"issuer with a query", func(c *config.ConsoleOIDC) { c.Issuer = "https://id.example.com/?x=1" }, "console.oidc.issuer"},
		{"issuer ftp", func(c *config.ConsoleOIDC) { c.Issuer = "ftp://id.example.com" }, "console.oidc.issuer"},
		{"secret env empty", func(c *config.ConsoleOIDC) { c.ClientSecretEnv = "OIDC_UNSET" }, `console.oidc.client_secret_env: the variable "OIDC_UNSET" is empty`},
		{"no client id", func(c *config.ConsoleOIDC) { c.ClientID = "" }, "console.oidc.client_id"},
		{"redirect not a URL", func(c *config.ConsoleOIDC) { c.RedirectURL = "/admin/oidc/callback" }, "console.oidc.redirect_url"},
		{"no role claim", func(c *config.ConsoleOIDC) { c.RoleClaim = "" }, "console.oidc.role_claim"},
		{"no values", func(c *config.ConsoleOIDC) { c.OperatorValues = nil }, "console.oidc.operator_values"},
	} {
		bad := good
		c.edit(&bad)
		if _, err := consoleauth.OIDCFromSpec(bad, getenv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

// The Authenticator refuses a bad OIDC block too (a console built without
// the spec).
func TestNewRefusesBadOIDC(t *testing.T) {
	_, err := consoleauth.New(consoleauth.Config{
		Store: &consoleauth.MemoryStore{}, TTL: 1e9, Idle: 1e9,
		OIDC: &consoleauth.OIDCConfig{Issuer: "not a url", ClientID: "c", ClientSecret: "s", RoleClaim: "groups", ReadOnlyValues: []string{"r"}},
	})
	if err == nil || !strings.Contains(err.Error(), "console.oidc.issuer") {
		t.Errorf("New with a bad issuer: %v", err)
	}
}
