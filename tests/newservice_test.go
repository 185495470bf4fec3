package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewServiceFromTemplate: make new's command writes a service with its
// own module path everywhere (only the lock and the changelog name the
// template's), a lock of the template commit and of every template-owned
// file, one git commit, a fresh generator stamp; in the service go build,
// go vet, make generate (no diff) and go test ./app/... pass. The service
// then adds a route, a middleware, a setting and a policy rule through its
// own files only (upgrade-check still passes, generate and build too, and
// the rule refuses a bad setting); and a newer template (a core file, a
// template file and the example app changed, plus a core edit the
// service also made) is upgraded into it: the core and template changes
// arrive, the service's app/, spec, settings and rules are untouched, the
// conflicting edit is reported and left with markers.
func TestNewServiceFromTemplate(t *testing.T) {
	mod := newServiceModule(t)
	root := t.TempDir()
	dir := filepath.Join(root, "billing")
	cmd := func(dir string, name string, args ...string) (string, error) {
		c := exec.Command(name, args...)
		c.Dir = dir
		// The build cache is the caller's (shared): the service's packages
		// differ from the template's only in their module path.
		c.Env = append(os.Environ(), "GOWORK=off", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := c.CombinedOutput()
		return string(out), err
	}
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		out, err := cmd(dir, name, args...)
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return out
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	replace := func(path, old, new string) {
		t.Helper()
		s := read(path)
		if !strings.Contains(s, old) {
			t.Fatalf("%s does not hold %q", path, old)
		}
		write(path, strings.Replace(s, old, new, 1))
	}
	bin := filepath.Join(root, "newservice")
	run("..", "go", "build", "-o", bin, "./cmd/newservice")
	// The template: a clone of this checkout's HEAD, so a newer template
	// can be committed on it below.
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmplDir := filepath.Join(root, "template")
	run(root, "git", "clone", "-q", repo, tmplDir)
	run(root, bin, "-module", mod, "-dir", dir, "-template", tmplDir)

	head := strings.TrimSpace(run(tmplDir, "git", "rev-parse", "HEAD"))
	var lock struct {
		Template, Version, Module string
		UserOwned                 []string `json:"user_owned"`
		Files                     map[string]string
		Conflicts                 []string
	}
	if err := json.Unmarshal([]byte(read(filepath.Join(dir, "cellgate.lock"))), &lock); err != nil {
		t.Fatal(err)
	}
	if lock.Template != "github.com/cellgate/cellgate" || lock.Version != head || lock.Module != mod {
		t.Errorf("lock names template %q version %q module %q; want github.com/cellgate/cellgate, %s, %s", lock.Template, lock.Version, lock.Module, head, mod)
	}
	for _, f := range []string{"go.mod", "internal/admission/doc.go", "cmd/server/main.go", "tmpl/jobs.go.tmpl", "policy/app.rego"} {
		if lock.Files[f] == "" {
			t.Errorf("the lock has no hash of the template-owned %s", f)
		}
	}
	for _, f := range []string{"app/app.go", "schema/app.cue", "schema/settings.cue", "policy/app/settings.rego"} {
		if _, ok := lock.Files[f]; ok {
			t.Errorf("the lock hashes the user-owned %s", f)
		}
	}
	userOwned := func(f string) bool {
		for _, p := range append(lock.UserOwned, "gen/") {
			if f == p || strings.HasSuffix(p, "/") && strings.HasPrefix(f, p) {
				return true
			}
		}
		return false
	}

	if n := strings.Count(run(dir, "git", "log", "--oneline"), "\n"); n != 1 {
		t.Errorf("the new repository has %d commits, want 1", n)
	}
	if st := run(dir, "git", "status", "--porcelain"); st != "" {
		t.Errorf("the new repository has changes not committed:\n%s", st)
	}
	for _, f := range strings.Split(strings.TrimSpace(run(dir, "git", "ls-files")), "\n") {
		if f == "cellgate.lock" || f == "CHANGELOG.md" {
			continue
		}
		if strings.Contains(read(filepath.Join(dir, f)), "github.com/cellgate/cellgate") {
			t.Errorf("%s still names the template's module path", f)
		}
	}
	if !strings.Contains(run(dir, "go", "list", "-m"), mod) {
		t.Errorf("go list -m in the service does not name %s", mod)
	}
	run(dir, "scripts/genstamp.sh", "check")
	run(dir, "go", "build", "./...")
	run(dir, "go", "vet", "./...")
	run(dir, "make", "generate")
	if st := run(dir, "git", "status", "--porcelain"); st != "" {
		t.Errorf("make generate in the new service changed files:\n%s", st)
	}
	run(dir, "go", "test", "-count=1", "./app/...")

	// The service's own additions, in its own files only: a route in a
	// group, the group's middleware, a setting the handler answers with,
	// a rule about that setting.
	replace(filepath.Join(dir, "schema/app.cue"), "routes: [\n",
		"routes: [\n\t\t{method: \"GET\", path: \"/hello\", handler: \"Hello\", group: \"greet\"},\n")
	replace(filepath.Join(dir, "schema/settings.cue"), "#Settings: {\n",
		"#Settings: {\n\t// greeting is what GET /hello answers.\n\tgreeting: string | *\"hello\"\n")
	replace(filepath.Join(dir, "app/app.go"), "return api.Middleware{Tenant: []echo.MiddlewareFunc{noStore}}",
		"return api.Middleware{Tenant: []echo.MiddlewareFunc{noStore}, Groups: map[string][]echo.MiddlewareFunc{\"greet\": {greetHeader}}}")
	write(filepath.Join(dir, "app/hello.go"), `package app

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"`+mod+`/gen/api"
)

// Hello answers the greeting setting.
func (a *App) Hello(c echo.Context, r api.Request) error {
	return c.String(http.StatusOK, a.d.Settings.Greeting+", "+r.Tenant)
}

// greetHeader marks the greet group's answers.
func greetHeader(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("X-Greet", "1")
		return next(c)
	}
}
`)
	write(filepath.Join(dir, "app/hello_test.go"), `package app_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHello(t *testing.T) {
	_, h := newServer(t)
	req := httptest.NewRequest("GET", "/hello", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "hello, acme" || rec.Header().Get("X-Greet") != "1" || rec.Header().Get("Cache-Control") != "private, no-store" {
		t.Fatalf("GET /hello: %d %q X-Greet %q Cache-Control %q", rec.Code, rec.Body.String(), rec.Header().Get("X-Greet"), rec.Header().Get("Cache-Control"))
	}
}
`)
	write(filepath.Join(dir, "policy/app/greeting.rego"), `package cellgate.app

deny contains "settings.greeting: must not be empty" if {
	input.settings.greeting == ""
}
`)
	run(dir, "make", "generate")
	run(dir, "go", "build", "./...")
	run(dir, "go", "vet", "./...")
	run(dir, "go", "test", "-count=1", "-run", "TestHello|TestExtensions", "./app/...")
	if !strings.Contains(read(filepath.Join(dir, "gen/settings/settings.go")), "Greeting string") {
		t.Errorf("gen/settings has no Greeting string field after the setting was added")
	}
	for _, l := range strings.Split(strings.TrimRight(run(dir, "git", "status", "--porcelain", "--untracked-files=all"), "\n"), "\n") {
		if f := strings.TrimSpace(l[2:]); !userOwned(f) {
			t.Errorf("adding a route, middleware, setting and rule changed %s, which is not the service's", f)
		}
	}
	run(dir, bin, "check")
	// The rule is live in the generator: an empty greeting is refused.
	replace(filepath.Join(dir, "schema/settings.cue"), `*"hello"`, `*""`)
	if out, err := cmd(dir, "go", "run", "./cmd/generate", "-check"); err == nil || !strings.Contains(out, "settings.greeting: must not be empty") {
		t.Errorf("generate with an empty greeting: %v, want the rule's refusal:\n%s", err, out)
	}
	replace(filepath.Join(dir, "schema/settings.cue"), `*""`, `*"hello"`)

	// The service also edits a core file, with a reason in the lock.
	const conflicted = "internal/admission/doc.go"
	write(filepath.Join(dir, conflicted), "// service edit\n"+read(filepath.Join(dir, conflicted)))
	replace(filepath.Join(dir, "cellgate.lock"), `"local_changes": []`,
		`"local_changes": [{"path": "`+conflicted+`", "reason": "test: a service's own note"}]`)
	run(dir, bin, "check")
	run(dir, "git", "add", "-A")
	run(dir, "git", "commit", "-qm", "the service's route, middleware, setting and rule")
	userBefore := map[string]string{}
	for _, f := range []string{"app/app.go", "app/hello.go", "schema/app.cue", "schema/settings.cue", "policy/app/greeting.rego", "policy/app/settings.rego"} {
		userBefore[f] = read(filepath.Join(dir, f))
	}

	// The newer template: a core file, a template file, the example app
	// and the file the service edited, in one commit.
	write(filepath.Join(tmplDir, "internal/runtime/doc.go"), read(filepath.Join(tmplDir, "internal/runtime/doc.go"))+"// template edit: core\n")
	write(filepath.Join(tmplDir, "tmpl/jobs.go.tmpl"), read(filepath.Join(tmplDir, "tmpl/jobs.go.tmpl"))+"{{/* template edit: tmpl */}}\n")
	write(filepath.Join(tmplDir, "app/app.go"), read(filepath.Join(tmplDir, "app/app.go"))+"// template edit: example app\n")
	write(filepath.Join(tmplDir, conflicted), "// template edit: conflicting\n"+read(filepath.Join(tmplDir, conflicted)))
	run(tmplDir, "git", "add", "-A")
	run(tmplDir, "git", "commit", "-qm", "a newer template")

	out, err := cmd(dir, bin, "upgrade", "-from", tmplDir, "-generate=false")
	t.Logf("make upgrade:\n%s", out)
	if err == nil || !strings.Contains(out, "CONFLICT") || !strings.Contains(out, conflicted) {
		t.Errorf("upgrade with a conflicting core edit: %v; want it reported as a conflict naming %s", err, conflicted)
	}
	if !strings.HasSuffix(read(filepath.Join(dir, "internal/runtime/doc.go")), "// template edit: core\n") {
		t.Errorf("the core change did not arrive in internal/runtime/doc.go")
	}
	if !strings.HasSuffix(read(filepath.Join(dir, "tmpl/jobs.go.tmpl")), "{{/* template edit: tmpl */}}\n") {
		t.Errorf("the template change did not arrive in tmpl/jobs.go.tmpl")
	}
	for f, before := range userBefore {
		if read(filepath.Join(dir, f)) != before {
			t.Errorf("the upgrade touched the service's %s", f)
		}
	}
	got := read(filepath.Join(dir, conflicted))
	for _, want := range []string{"<<<<<<< service", "// service edit", "// template edit: conflicting", ">>>>>>> template"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q: the conflicting edit was overwritten, not left for the service:\n%.300s", conflicted, want, got)
		}
	}
	if err := json.Unmarshal([]byte(read(filepath.Join(dir, "cellgate.lock"))), &lock); err != nil {
		t.Fatal(err)
	}
	if len(lock.Conflicts) != 1 || lock.Conflicts[0] != conflicted {
		t.Errorf("the lock lists conflicts %v, want [%s]", lock.Conflicts, conflicted)
	}
}

// TestUpgradeFromNewerTemplate: a service made from a clone of the
// template takes a newer commit of that clone (a core file, a template in
// tmpl/, the example app and the changelog changed, a file added): the core
// and tmpl/ changes arrive, the service's app/ and spec are untouched, a
// core file both sides changed at the same place is left with conflict
// markers and listed, and upgrade-check fails on an unrecorded edit, on an
// unresolved conflict, and passes once the edit is recorded in
// local_changes.
func TestUpgradeFromNewerTemplate(t *testing.T) {
	mod := newServiceModule(t)
	root := t.TempDir()
	tmplDir, svc, bin := filepath.Join(root, "template"), filepath.Join(root, "billing"), filepath.Join(root, "newservice")
	cmd := func(dir, name string, args ...string) (string, error) {
		c := exec.Command(name, args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GOWORK=off", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := c.CombinedOutput()
		return string(out), err
	}
	run := func(dir, name string, args ...string) string {
		t.Helper()
		out, err := cmd(dir, name, args...)
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return out
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	editLock := func(edit func(m map[string]any)) {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(read(filepath.Join(svc, "cellgate.lock"))), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(svc, "cellgate.lock"), string(b)+"\n")
	}

	run("..", "go", "build", "-o", bin, "./cmd/newservice")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	run(root, "git", "clone", "-q", repo, tmplDir)
	run(root, bin, "-module", mod, "-dir", svc, "-template", tmplDir)
	if !strings.Contains(read(filepath.Join(svc, "OWNERSHIP.md")), "`app/`") {
		t.Errorf("OWNERSHIP.md does not name app/ as the user's")
	}

	// The service edits a core file: upgrade-check names it until the
	// edit is recorded with a reason.
	const conflicted = "internal/admission/doc.go"
	write(filepath.Join(svc, conflicted), "// service edit\n"+read(filepath.Join(svc, conflicted)))
	if out, err := cmd(svc, bin, "check"); err == nil || !strings.Contains(out, conflicted) {
		t.Errorf("upgrade-check passed or did not name %s after an unrecorded edit: %v\n%s", conflicted, err, out)
	}
	editLock(func(m map[string]any) {
		m["local_changes"] = []any{map[string]any{"path": conflicted, "reason": "test: a service's own note"}}
	})
	if out, err := cmd(svc, bin, "check"); err != nil {
		t.Errorf("upgrade-check failed with the edit recorded in local_changes: %v\n%s", err, out)
	}
	run(svc, "git", "commit", "-qam", "service edits")
	appBefore, specBefore := read(filepath.Join(svc, "app/app.go")), read(filepath.Join(svc, "schema/app.cue"))

	// The newer template: one commit.
	write(filepath.Join(tmplDir, "internal/runtime/doc.go"), read(filepath.Join(tmplDir, "internal/runtime/doc.go"))+"// template edit: core\n")
	write(filepath.Join(tmplDir, "tmpl/jobs.go.tmpl"), read(filepath.Join(tmplDir, "tmpl/jobs.go.tmpl"))+"{{/* template edit: tmpl */}}\n")
	write(filepath.Join(tmplDir, conflicted), "// template edit: conflicting\n"+read(filepath.Join(tmplDir, conflicted)))
	write(filepath.Join(tmplDir, "app/app.go"), read(filepath.Join(tmplDir, "app/app.go"))+"// template edit: example app\n")
	write(filepath.Join(tmplDir, "docs/added.md"), "# Added in github.com/cellgate/cellgate\n")
	write(filepath.Join(tmplDir, "CHANGELOG.md"), strings.Replace(read(filepath.Join(tmplDir, "CHANGELOG.md")),
		"## [Unreleased]\n", "## [9.9.9] - 2099-01-01\n\n### Fixed\n- template edit: a changelog entry.\n\n## [Unreleased]\n", 1))
	run(tmplDir, "git", "add", "-A")
	run(tmplDir, "git", "commit", "-qm", "a newer template")
	newHead := strings.TrimSpace(run(tmplDir, "git", "rev-parse", "HEAD"))

	out, err := cmd(svc, bin, "upgrade", "-from", tmplDir)
	t.Logf("make upgrade:\n%s", out)
	if err == nil {
		t.Errorf("upgrade with a conflict exited 0:\n%s", out)
	}
	for _, want := range []string{"CONFLICT", conflicted, "template edit: a changelog entry", "added", "docs/added.md", "resolve the conflicts"} {
		if !strings.Contains(out, want) {
			t.Errorf("upgrade's summary lacks %q:\n%s", want, out)
		}
	}
	if got := read(filepath.Join(svc, "internal/runtime/doc.go")); !strings.HasSuffix(got, "// template edit: core\n") {
		t.Errorf("the core change did not arrive in internal/runtime/doc.go")
	}
	if got := read(filepath.Join(svc, "tmpl/jobs.go.tmpl")); !strings.HasSuffix(got, "{{/* template edit: tmpl */}}\n") {
		t.Errorf("the tmpl/ change did not arrive in tmpl/jobs.go.tmpl")
	}
	if got := read(filepath.Join(svc, "docs/added.md")); got != "# Added in "+mod+"\n" {
		t.Errorf("docs/added.md, new in the template, is %q; want it with the service's module path", got)
	}
	if read(filepath.Join(svc, "app/app.go")) != appBefore || read(filepath.Join(svc, "schema/app.cue")) != specBefore {
		t.Errorf("the upgrade touched the user-owned app/app.go or schema/app.cue")
	}
	got := read(filepath.Join(svc, conflicted))
	for _, want := range []string{"<<<<<<< service", "// service edit", "=======", "// template edit: conflicting", ">>>>>>> template"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q after the conflicting upgrade:\n%.400s", conflicted, want, got)
		}
	}
	var lock struct {
		Version   string
		Conflicts []string
	}
	if err := json.Unmarshal([]byte(read(filepath.Join(svc, "cellgate.lock"))), &lock); err != nil {
		t.Fatal(err)
	}
	if lock.Version != newHead || len(lock.Conflicts) != 1 || lock.Conflicts[0] != conflicted {
		t.Errorf("the lock after the upgrade has version %s conflicts %v; want %s and [%s]", lock.Version, lock.Conflicts, newHead, conflicted)
	}

	// upgrade-check flags the conflict until it is resolved and taken off
	// the lock's list; the service's kept edit is covered by its reason.
	if out, err := cmd(svc, bin, "check"); err == nil || !strings.Contains(out, conflicted) {
		t.Errorf("upgrade-check passed or did not name %s with the conflict unresolved: %v\n%s", conflicted, err, out)
	}
	var resolved []string // both sides' lines, markers dropped
	for _, l := range strings.SplitAfter(got, "\n") {
		if !strings.HasPrefix(l, "<<<<<<< ") && !strings.HasPrefix(l, "=======") && !strings.HasPrefix(l, ">>>>>>> ") {
			resolved = append(resolved, l)
		}
	}
	write(filepath.Join(svc, conflicted), strings.Join(resolved, ""))
	editLock(func(m map[string]any) { delete(m, "conflicts") })
	if out, err := cmd(svc, bin, "check"); err != nil {
		t.Errorf("upgrade-check failed with the conflict resolved and the edit recorded: %v\n%s", err, out)
	}
}

// newServiceModule is the module path these tests give a new service: one
// that neither contains nor is contained in this checkout's own module
// path, so the tests also pass in a service made from the template (whose
// module may well be example.com/acme/billing), where "no template module
// path left" must not match the new service's own path.
func newServiceModule(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			own = strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	if own == "" {
		t.Fatal("../go.mod names no module")
	}
	for _, m := range []string{"example.com/acme/billing", "example.com/acme/ledger"} {
		if !strings.Contains(own, m) && !strings.Contains(m, own) {
			return m
		}
	}
	t.Fatalf("no new-service module path apart from this checkout's %q", own)
	return ""
}
