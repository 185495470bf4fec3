// Package policy evaluates cellgate's Rego rules over a service config: the
// cross-field invariants (deny) and risky settings (warn) that CUE types
// cannot express. The generator runs it over the exported `config` JSON and
// the server re-checks its final config at boot with the same embedded files,
// so both see one rule set.
//
// Concurrency contract: an [Evaluator] is immutable after [New] returns; its
// prepared query may be evaluated by any number of goroutines at once. A
// [Result] is a plain value owned by the caller.
package policy

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// The template's rule files are listed one by one because go:embed cannot
// exclude the *_test.rego files beside them; TestEmbedsEveryRuleFile fails
// when a new rule file is missing here. app/ is the service's own rule
// directory (package cellgate.app, joined by app.rego), embedded whole;
// Modules leaves out its *_test.rego files.
//
//go:embed lib.rego slots.rego jobs.rego tenancy.rego names.rego database.rego server.rego router.rego console.rego deploy.rego routes.rego conftest.rego app.rego app
var files embed.FS

// ruleGlobs are where Modules finds rule files in files.
var ruleGlobs = []string{"*.rego", "app/*.rego"}

// Package is the Rego package holding the deny and warn sets.
const Package = "cellgate.policy"

// query binds both sets in one evaluation so shared intermediate rules (the
// slot maps) are computed once.
const query = "deny := data." + Package + ".deny; warn := data." + Package + ".warn"

// Result is the outcome of one evaluation. Both lists are sorted, so equal
// configs give equal results. Every message starts with the spec path it is
// about, e.g. "jobs.tenants.lanes: 12 lanes but only 8 workers; ...".
type Result struct {
	// Deny holds violated invariants: the config must not be used.
	Deny []string
	// Warn holds legal but risky settings, to be logged or printed.
	Warn []string
}

// Err returns nil when r has no deny message, and otherwise a *DenyError
// listing every one of them.
func (r Result) Err() error {
	if len(r.Deny) == 0 {
		return nil
	}
	return &DenyError{Deny: slices.Clone(r.Deny)}
}

// DenyError is the error of a config that the policy denies.
type DenyError struct {
	// Deny holds every deny message, sorted.
	Deny []string
}

// Error lists every message, one per line, so a CI log shows them all.
func (e *DenyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy: config denied (%d)", len(e.Deny))
	for _, m := range e.Deny {
		b.WriteString("\n  - ")
		b.WriteString(m)
	}
	return b.String()
}

// Evaluator holds the compiled, prepared policy. Build it once with New and
// share it; it is safe for concurrent use.
type Evaluator struct {
	pq rego.PreparedEvalQuery
}

// New compiles the embedded rules (Rego v1, strict mode) and prepares the
// query. Builtin errors abort an evaluation instead of silently making a rule
// undefined: a rule that fails to run must not read as "no violation".
func New(ctx context.Context) (*Evaluator, error) {
	mods, err := Modules()
	if err != nil {
		return nil, err
	}
	opts := []func(*rego.Rego){
		rego.Query(query),
		rego.Strict(true),
		rego.StrictBuiltinErrors(true),
		rego.SetRegoVersion(ast.RegoV1),
	}
	for _, name := range slices.Sorted(maps.Keys(mods)) {
		opts = append(opts, rego.ParsedModule(mods[name]))
	}
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: prepare: %w", err)
	}
	return &Evaluator{pq: pq}, nil
}

// Eval evaluates the policy over input: the config as decoded JSON
// (map[string]any, numbers as float64 or json.Number) or any value that
// encoding/json can marshal to the same shape. The rules assume the shape
// and types CUE guarantees (a string where a number belongs is CUE's error to
// report, not the policy's); nil slices marshalled as null read as empty.
func (e *Evaluator) Eval(ctx context.Context, input any) (Result, error) {
	v, err := ast.InterfaceToValue(input)
	if err != nil {
		return Result{}, fmt.Errorf("policy: input: %w", err)
	}
	if _, ok := v.(ast.Object); !ok {
		return Result{}, fmt.Errorf("policy: input: want a JSON object, got %s", ast.ValueName(v))
	}
	rs, err := e.pq.Eval(ctx, rego.EvalParsedInput(v))
	if err != nil {
		return Result{}, fmt.Errorf("policy: eval: %w", err)
	}
	if len(rs) != 1 {
		return Result{}, fmt.Errorf("policy: eval: %d results, want 1", len(rs))
	}
	var r Result
	if r.Deny, err = messages(rs[0].Bindings, "deny"); err != nil {
		return Result{}, err
	}
	if r.Warn, err = messages(rs[0].Bindings, "warn"); err != nil {
		return Result{}, err
	}
	return r, nil
}

// messages reads one set binding as a sorted []string.
func messages(b rego.Vars, name string) ([]string, error) {
	set, ok := b[name].([]any)
	if !ok {
		return nil, fmt.Errorf("policy: %s is %T, want a set of strings", name, b[name])
	}
	out := make([]string, 0, len(set))
	for _, m := range set {
		s, ok := m.(string)
		if !ok {
			return nil, fmt.Errorf("policy: %s holds %T, want string", name, m)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

// Modules parses the embedded rule files, keyed by file name. Tests and tools
// use it to run the Rego unit tests against exactly what the binary embeds.
func Modules() (map[string]*ast.Module, error) {
	var names []string
	for _, g := range ruleGlobs {
		ns, err := fs.Glob(files, g)
		if err != nil {
			return nil, err
		}
		names = append(names, ns...)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.rego") })
	mods := make(map[string]*ast.Module, len(names))
	for _, name := range names {
		src, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		m, err := ast.ParseModuleWithOpts(name, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		mods[name] = m
	}
	if len(mods) == 0 {
		return nil, errors.New("policy: no embedded rule files")
	}
	return mods, nil
}
