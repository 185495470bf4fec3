package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/tester"
)

// withTestModules returns the embedded rule modules plus every *_test.rego
// file beside them.
func withTestModules(tb testing.TB) map[string]*ast.Module {
	tb.Helper()
	mods, err := Modules()
	if err != nil {
		tb.Fatal(err)
	}
	paths, err := filepath.Glob("*_test.rego")
	if err != nil {
		tb.Fatal(err)
	}
	appPaths, err := filepath.Glob("app/*_test.rego") // the service's own
	if err != nil {
		tb.Fatal(err)
	}
	paths = append(paths, appPaths...)
	if len(paths) == 0 {
		tb.Fatal("no *_test.rego files")
	}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		m, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			tb.Fatal(err)
		}
		mods[p] = m
	}
	return mods
}

// regoTestTimeout is `opa test`'s default per-test timeout: a test that
// passes here passes `opa test policy/` with no flag.
const regoTestTimeout = 5 * time.Second

// TestRego runs every test_ rule of the *_test.rego files against the
// embedded rule files, through the OPA Go API (CI has no opa binary). Each
// Rego test is a subtest; a failed or errored one fails this test.
func TestRego(t *testing.T) {
	mods := withTestModules(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	compiler := ast.NewCompiler().
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithDefaultRegoVersion(ast.RegoV1).
		WithStrict(true)
	ch, err := tester.NewRunner().
		SetCompiler(compiler).
		SetModules(mods).
		RaiseBuiltinErrors(true).
		SetTimeout(regoTestTimeout).
		RunTests(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	if len(results) == 0 {
		t.Fatal("no Rego tests ran")
	}
	slices.SortFunc(results, func(a, b *tester.Result) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range results {
		if r.Duration > time.Second {
			t.Logf("slow Rego test %s: %v", r.Name, r.Duration)
		}
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
			switch {
			case r.Error != nil:
				t.Errorf("%s: error: %v", r.Location, r.Error)
			case r.Skip:
				t.Errorf("%s: skipped (todo_ prefix); a skipped test is a failed test", r.Location)
			case r.Fail && r.FailedAt != nil:
				t.Errorf("%s: failed at %v", r.Location, r.FailedAt)
			case r.Fail:
				t.Errorf("%s: failed", r.Location)
			}
		})
	}
	t.Logf("%d Rego tests", len(results))
}

// TestRegoFilesFormatted is gofmt for the Rego files: each must be exactly
// what `opa fmt` (the format package) would write.
func TestRegoFilesFormatted(t *testing.T) {
	paths, err := filepath.Glob("*.rego")
	if err != nil {
		t.Fatal(err)
	}
	appPaths, err := filepath.Glob("app/*.rego")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, appPaths...)
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := format.SourceWithOpts(p, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if string(want) != string(src) {
			t.Errorf("%s is not formatted (opa fmt -w %s)", p, p)
		}
	}
}

// TestRegoFixtureIsDefaultConfig keeps the Rego tests' base config (in
// fixture_test.rego) equal to testdata/default.json, so the Rego tests and
// the Go tests start from the same spec.
func TestRegoFixtureIsDefaultConfig(t *testing.T) {
	opts := []func(*rego.Rego){rego.Query("x := data.cellgate.policy_test.base")}
	for _, m := range withTestModules(t) {
		opts = append(opts, rego.ParsedModule(m))
	}
	rs, err := rego.New(opts...).Eval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d results", len(rs))
	}
	got, err := json.Marshal(rs[0].Bindings["x"])
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(loadConfig(t, "testdata/default.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("fixture_test.rego base differs from testdata/default.json:\n%s\n%s", got, want)
	}
}
