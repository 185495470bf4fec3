package specload

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/schema"
)

// specDir is the repository's spec, the one the generator reads.
const specDir = "../"

func TestLoadTheAppSpec(t *testing.T) {
	raw, err := Load(specDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(raw); err != nil {
		t.Fatalf("the exported app spec does not pass Check: %v", err)
	}
}

func TestCheckNamesThePath(t *testing.T) {
	raw, err := Load(specDir)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), `"workers":4`, `"workers":0`, 1)
	if bad == string(raw) {
		t.Fatal(`fixture: the app spec no longer has "workers":4`)
	}
	err = schema.Check([]byte(bad))
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

// TestLoadSpecNoConfig: a spec without the config field is refused with a
// message naming the directory and the shape it needs.
func TestLoadSpecNoConfig(t *testing.T) {
	dir := appDir(t, "package cellgate\n\nother: 1\n")
	_, err := LoadSpec(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "config: #Config & {...}") {
		t.Fatalf("err = %v, want one naming %s and the config field", err, dir)
	}
}

// TestLoadSpecPlacesInConfigBlock: a spec's CUE problems are placed at the
// user's field in the config block, by spec path.
func TestLoadSpecPlacesInConfigBlock(t *testing.T) {
	sp := loadApp(t, "package cellgate\n\nconfig: #Config & {\n\tservice: name: \"s\"\n\tjobs: {\n\t\tworkers: 0\n\t\tkinds: [{name: \"a\", timeout: \"5 s\"}]\n\t}\n}\n")
	var got []string
	for _, is := range sp.Issues {
		got = append(got, is.Path+" "+filepath.Base(is.File)+":"+strconv.Itoa(is.Line)+":"+strconv.Itoa(is.Col))
	}
	want := []string{"jobs.workers app.cue:6:12", "jobs.kinds[0].timeout app.cue:7:32"}
	if !slices.Equal(got, want) {
		t.Fatalf("issues %q, want %q", got, want)
	}
	if len(sp.Partial) == 0 || sp.Complete != nil {
		t.Fatalf("a refused spec has a partial config and no complete one")
	}
}

// TestLoadSpecOtherDeclaration: a field set by a declaration other than
// the config block's literal keeps CUE's position (it is not a default).
func TestLoadSpecOtherDeclaration(t *testing.T) {
	sp := loadApp(t, "package cellgate\n\nconfig: #Config & {\n\tservice: name: \"s\"\n}\n\nconfig: jobs: workers: 0\n")
	if len(sp.Issues) != 1 {
		t.Fatalf("issues %+v", sp.Issues)
	}
	is := sp.Issues[0]
	if is.Path != "jobs.workers" || is.Default || filepath.Base(is.File) != "app.cue" || is.Line != 7 {
		t.Fatalf("issue %s, want jobs.workers at app.cue:7", is)
	}
}

// TestLoadSpecWholeConfigPlaced: a problem with the config value as a whole
// (another declaration gives it another type) keeps CUE's position in the
// spec; placing by path would have nothing to place it with.
func TestLoadSpecWholeConfigPlaced(t *testing.T) {
	sp := loadApp(t, "package cellgate\n\nconfig: #Config & {\n\tservice: name: \"s\"\n}\n\nconfig: 5\n")
	if len(sp.Issues) != 1 {
		t.Fatalf("issues %+v", sp.Issues)
	}
	if is := sp.Issues[0]; is.Path != "" || filepath.Base(is.File) != "app.cue" || is.Line == 0 {
		t.Fatalf("issue %s, want one placed in app.cue", is)
	}
}

// appDir writes a spec directory of cellgate.cue and app.cue (the source
// given).
func appDir(tb testing.TB, app string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, s := range map[string]string{"cellgate.cue": schema.Definitions, "app.cue": app} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// loadApp loads the spec of app.cue beside cellgate.cue (appDir).
func loadApp(tb testing.TB, app string) *schema.Spec {
	tb.Helper()
	sp, err := LoadSpec(appDir(tb, app))
	if err != nil {
		tb.Fatal(err)
	}
	return sp
}

// console.oidc: an issuer or redirect URL that is not an http(s) URL, an
// empty role claim and a secret variable that is no variable name are
// refused, naming the field; a good block passes.
func TestCheckConsoleOIDC(t *testing.T) {
	raw, err := Load(specDir)
	if err != nil {
		t.Fatal(err)
	}
	// Replacements apply inside the console.oidc block only: other blocks
	// (tenancy.jwt) have an issuer too.
	at := strings.Index(string(raw), `"oidc":{`)
	if at < 0 {
		t.Fatal(`fixture: the app spec has no "oidc":{ block`)
	}
	replace := func(from, to string) string {
		return string(raw[:at]) + strings.Replace(string(raw[at:]), from, to, 1)
	}
	const from = `"issuer":""`
	if !strings.Contains(string(raw[at:]), from) {
		t.Fatalf("fixture: the oidc block no longer has %s", from)
	}
	good := replace(from, `"issuer":"https://sso.example.com/realms/ops"`)
	if err := schema.Check([]byte(good)); err != nil {
		t.Errorf("a good issuer: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{from, `"issuer":"sso.example.com"`, "console.oidc.issuer"},
		{from, `"issuer":"https://sso.example.com/?a=1"`, "console.oidc.issuer"},
		{`"redirect_url":""`, `"redirect_url":"/admin/oidc/callback"`, "console.oidc.redirect_url"},
		{`"role_claim":"groups"`, `"role_claim":""`, "console.oidc.role_claim"},
		{`"client_secret_env":"CELLGATE_CONSOLE_OIDC_CLIENT_SECRET"`, `"client_secret_env":"not a var"`, "console.oidc.client_secret_env"},
	} {
		bad := replace(c.from, c.to)
		if bad == string(raw) {
			t.Fatalf("fixture: the app spec no longer has %s", c.from)
		}
		if err := schema.Check([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %s", c.to, err, c.want)
		}
	}
}
