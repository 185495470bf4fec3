package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/schema"
)

var update = flag.Bool("update", false, "rewrite testdata/*/expected from the current output")

// specDir lays the real definitions beside a case's app.cue, so the cases
// never carry a stale copy of schema/cellgate.cue.
func specDir(t testing.TB, caseDir string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cellgate.cue"), []byte(schema.Definitions), 0o644); err != nil {
		t.Fatal(err)
	}
	app, err := os.ReadFile(filepath.Join(caseDir, "app.cue"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.cue"), app, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func cases(t *testing.T, prefix string, invalid bool) []string {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "invalid_") == invalid && strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatal("no test cases found in testdata")
	}
	return out
}

// TestGolden renders each valid case and compares every file with
// testdata/<case>/expected. Run with -update to accept a change.
func TestGolden(t *testing.T) {
	for _, name := range cases(t, "", false) {
		t.Run(name, func(t *testing.T) {
			caseDir := filepath.Join("testdata", name)
			files, _, err := generate(context.Background(), options{specDir: specDir(t, caseDir), sqlc: false})
			if err != nil {
				t.Fatalf("generate: %v", err)
			}
			expDir := filepath.Join(caseDir, "expected")
			if *update {
				if err := os.RemoveAll(expDir); err != nil {
					t.Fatal(err)
				}
				if err := write(expDir, files); err != nil {
					t.Fatal(err)
				}
			}
			want, err := readTree(os.DirFS(expDir))
			if err != nil {
				t.Fatalf("read expected (run go test ./cmd/generate -update): %v", err)
			}
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if !bytes.Equal(files[n], want[n]) {
					t.Errorf("%s differs from testdata/%s/expected (run with -update if intended)", n, name)
				}
				if strings.HasSuffix(n, ".go") && !bytes.HasPrefix(files[n], []byte(Header)) {
					t.Errorf("%s does not start with the generated-code header", n)
				}
			}
			if len(want) != len(files) {
				t.Errorf("expected %d files, rendered %d", len(want), len(files))
			}
		})
	}
}

// TestDeterministic renders the richest case twice.
func TestDeterministic(t *testing.T) {
	dir := specDir(t, filepath.Join("testdata", "full"))
	a, _, err := generate(context.Background(), options{specDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := generate(context.Background(), options{specDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for n := range a {
		if !bytes.Equal(a[n], b[n]) {
			t.Fatalf("%s differs between two renders", n)
		}
	}
}

// TestInvalidSpecs runs the command on each invalid case: it must exit
// non-zero and print every line of want.txt, with no panic or stack trace.
func TestInvalidSpecs(t *testing.T) {
	for _, name := range cases(t, "invalid_", true) {
		t.Run(name, func(t *testing.T) {
			caseDir := filepath.Join("testdata", name)
			want, err := os.ReadFile(filepath.Join(caseDir, "want.txt"))
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			dir := specDir(t, caseDir)
			code := run([]string{"-spec", dir, "-out", t.TempDir(), "-sqlc=false"}, &stdout, &stderr)
			if code == 0 {
				t.Fatalf("exit code 0 for an invalid spec; stderr:\n%s", stderr.String())
			}
			// Positions name the spec file by its path; want.txt names it
			// app.cue, so a position is checked on its issue's line.
			out := strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), "")
			for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
				if !strings.Contains(out, line) {
					t.Errorf("output does not contain %q:\n%s", line, out)
				}
			}
			for _, bad := range []string{"panic", "goroutine ", ".go:"} {
				if strings.Contains(out, bad) {
					t.Errorf("output leaks %q:\n%s", bad, out)
				}
			}
		})
	}
}

// TestCheckDetectsDrift writes the output, edits one file, and expects
// -check to fail naming it; then a clean tree passes.
func TestCheckDetectsDrift(t *testing.T) {
	spec := specDir(t, filepath.Join("testdata", "default"))
	out := t.TempDir()
	args := []string{"-spec", spec, "-out", out, "-sqlc=false"}
	var so, se bytes.Buffer
	if code := run(args, &so, &se); code != 0 {
		t.Fatalf("generate failed: %s", se.String())
	}
	if code := run(append(args, "-check"), &so, &se); code != 0 {
		t.Fatalf("-check on a fresh tree failed: %s", se.String())
	}
	path := filepath.Join(out, "spec", "spec.go")
	if err := os.WriteFile(path, []byte("// hand edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	se.Reset()
	if code := run(append(args, "-check"), &so, &se); code == 0 {
		t.Fatal("-check passed on an edited tree")
	}
	if !strings.Contains(se.String(), "changed: "+path) {
		t.Fatalf("-check output does not name the edited file:\n%s", se.String())
	}
}

// TestSpecChangeChangesOutput: a value changed in the spec shows in gen/.
func TestSpecChangeChangesOutput(t *testing.T) {
	dir := specDir(t, filepath.Join("testdata", "default"))
	before, _, err := generate(context.Background(), options{specDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app.cue")
	src, _ := os.ReadFile(app)
	edited := strings.Replace(string(src), "workers: 4", "workers: 6", 1)
	if edited == string(src) {
		t.Fatal("fixture no longer contains `workers: 4`")
	}
	if err := os.WriteFile(app, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	after, _, err := generate(context.Background(), options{specDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before["spec/spec.go"], after["spec/spec.go"]) {
		t.Fatal("spec/spec.go did not change after editing jobs.workers")
	}
}

func TestGoName(t *testing.T) {
	for in, want := range map[string]string{"account_id": "AccountID", "send_welcome": "SendWelcome", "due_at": "DueAt", "url": "URL"} {
		if got := config.GoName(in); got != want {
			t.Errorf("config.GoName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGoldenCompiles builds every golden output as if it were a package of
// this module (go build -overlay maps virtual files onto testdata), so a
// template change that renders uncompilable Go fails here, not in a user's
// build.
func TestGoldenCompiles(t *testing.T) {
	if out, err := buildGolden(t, nil, "./internal/gencheck/..."); err != nil {
		t.Fatalf("golden output does not compile: %v\n%s", err, out)
	}
}

// TestGoldenWorkersChecked holds the promise of gen/jobkinds.Workers: an
// app that implements every kind of the "full" case builds, and one that
// lacks the bill_order worker fails to build, naming the missing method.
func TestGoldenWorkersChecked(t *testing.T) {
	const complete = `package workers

import (
	"context"

	"github.com/cellgate/cellgate/internal/gencheck/full/jobkinds"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

type impl struct{}

func (impl) SendWelcome(context.Context, *jobs.Job[jobkinds.SendWelcomeArgs], shards.Accessor) error {
	return nil
}
%s
var _ = func() { jobkinds.RegisterWorkers(jobs.NewWorkers(), nil, impl{}) }
`
	billOrder := "func (impl) BillOrder(context.Context, *jobs.Job[jobkinds.BillOrderArgs], shards.Accessor) error {\n\treturn nil\n}\n"
	ok := map[string]string{"full/workersok/w.go": fmt.Sprintf(complete, billOrder)}
	if out, err := buildGolden(t, ok, "./internal/gencheck/full/workersok"); err != nil {
		t.Fatalf("an app implementing every kind does not build: %v\n%s", err, out)
	}
	missing := map[string]string{"full/workersmissing/w.go": fmt.Sprintf(complete, "")}
	out, err := buildGolden(t, missing, "./internal/gencheck/full/workersmissing")
	if err == nil {
		t.Fatal("an app without the bill_order worker builds")
	}
	if !strings.Contains(string(out), "missing method BillOrder") {
		t.Fatalf("the build error does not name the missing worker:\n%s", out)
	}
}

// buildGolden runs go build on pkgs with every golden output mapped, by
// -overlay, to internal/gencheck/<case>/ of this module, plus extra files
// (path under internal/gencheck → Go source).
func buildGolden(t *testing.T, extra map[string]string, pkgs ...string) ([]byte, error) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	replace := map[string]string{}
	for _, name := range cases(t, "", false) {
		exp, err := filepath.Abs(filepath.Join("testdata", name, "expected"))
		if err != nil {
			t.Fatal(err)
		}
		files, err := readTree(os.DirFS(exp))
		if err != nil {
			t.Fatal(err)
		}
		for path := range files {
			virtual := filepath.Join(root, "internal", "gencheck", name, path)
			replace[virtual] = filepath.Join(exp, path)
		}
	}
	tmp := t.TempDir()
	for path, src := range extra {
		file := filepath.Join(tmp, strings.ReplaceAll(path, "/", "_"))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(root, "internal", "gencheck", filepath.FromSlash(path))] = file
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(file, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", file}, pkgs...)...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}
