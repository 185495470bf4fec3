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
// file, one git commit, a fresh generator stamp; and the service builds and
// vets on its own.
func TestNewServiceFromTemplate(t *testing.T) {
	const mod = "example.com/acme/billing"
	dir := filepath.Join(t.TempDir(), "billing")
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}
	run("..", "go", "run", "./cmd/newservice", "-module", mod, "-dir", dir, "-template", ".")

	head := strings.TrimSpace(run("..", "git", "rev-parse", "HEAD"))
	raw, err := os.ReadFile(filepath.Join(dir, "cellgate.lock"))
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Template, Version, Module string
		Files                     map[string]string
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatal(err)
	}
	if lock.Template != "github.com/cellgate/cellgate" || strings.TrimSuffix(lock.Version, "+dirty") != head || lock.Module != mod {
		t.Errorf("lock names template %q version %q module %q; want github.com/cellgate/cellgate, %s, %s", lock.Template, lock.Version, lock.Module, head, mod)
	}
	for _, f := range []string{"go.mod", "internal/admission/doc.go", "cmd/server/main.go", "tmpl/jobs.go.tmpl"} {
		if lock.Files[f] == "" {
			t.Errorf("the lock has no hash of the template-owned %s", f)
		}
	}
	for _, f := range []string{"app/app.go", "schema/app.cue"} {
		if _, ok := lock.Files[f]; ok {
			t.Errorf("the lock hashes the user-owned %s", f)
		}
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
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "github.com/cellgate/cellgate") {
			t.Errorf("%s still names the template's module path", f)
		}
	}
	if !strings.Contains(run(dir, "go", "list", "-m"), mod) {
		t.Errorf("go list -m in the service does not name %s", mod)
	}
	run(dir, "scripts/genstamp.sh", "check")
	run(dir, "go", "build", "./...")
	run(dir, "go", "vet", "./...")
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
	const mod = "example.com/acme/billing"
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
