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
