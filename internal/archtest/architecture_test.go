package archtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The import rules live in one table, in docs/architecture.md between the
// import-rules markers, so the page a maintainer reads is the rule the test
// holds. TestArchitecture checks the module against it; TestArchitectureRules
// proves the checker fails on each kind of broken rule.

const (
	module      = "github.com/cellgate/cellgate"
	rulesDoc    = "../../docs/architecture.md"
	rulesBegin  = "<!-- import-rules:begin -->"
	rulesEnd    = "<!-- import-rules:end -->"
	anyPackages = "anything"
)

// importRule is one row of the table.
type importRule struct {
	line     int      // in docs/architecture.md
	packages []string // patterns of the packages the row is about
	may      []string // patterns of this module's packages they may import
	never    []string // patterns of packages they must never link, at any depth
	any      bool     // "anything" in the may column: no allow-list
}

// importGraph is every package a build of the module links: import path →
// its imports (standard library and other modules included).
type importGraph map[string][]string

func TestArchitecture(t *testing.T) {
	rules, err := readImportRules(rulesDoc)
	if err != nil {
		t.Fatal(err)
	}
	g, own, err := loadImportGraph("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range checkArchitecture(g, own, rules) {
		t.Error(v)
	}
}

// TestArchitectureRules breaks each kind of rule on purpose in a made-up
// graph: the checker must name the rule's line and the whole chain.
func TestArchitectureRules(t *testing.T) {
	rules, err := parseImportRules(strings.NewReader(`| packages | may | never | why |
|---|---|---|---|
| ` + "`internal/jobs/...`" + ` | ` + "`internal/jobs/...`, `internal/shards`" + ` | ` + "`github.com/labstack/echo/v4`, `internal/runtime/...`" + ` | x |
| ` + "`internal/shards`" + ` | — | — | x |
| ` + "`cmd/server`" + ` | anything | — | x |
`))
	if err != nil {
		t.Fatal(err)
	}
	m := func(p string) string { return module + "/" + p }
	cases := []struct {
		name string
		g    importGraph
		want []string
	}{
		{"clean", importGraph{
			m("internal/jobs"):   {m("internal/shards"), "context"},
			m("internal/shards"): {"github.com/jackc/pgx/v5"},
			m("cmd/server"):      {m("internal/jobs"), "github.com/labstack/echo/v4"},
		}, nil},
		{"a forbidden link two hops down", importGraph{
			m("internal/jobs"):     {m("internal/shards")},
			m("internal/shards"):   {"github.com/other/lib"},
			"github.com/other/lib": {"github.com/labstack/echo/v4"},
			m("cmd/server"):        {m("internal/jobs")},
		}, []string{"line 3: internal/jobs must never link github.com/labstack/echo/v4: internal/jobs → internal/shards → github.com/other/lib → github.com/labstack/echo/v4"}},
		{"an import outside the allow-list", importGraph{
			m("internal/jobs/local"): {m("internal/jobs"), m("internal/runtime")},
			m("internal/jobs"):       {},
			m("internal/runtime"):    {},
			m("cmd/server"):          {},
		}, []string{"line 3: internal/jobs/local may not import internal/runtime",
			"line 3: internal/jobs/local must never link internal/runtime: internal/jobs/local → internal/runtime",
			"internal/runtime matches no row"}},
		{"a package without a row", importGraph{
			m("internal/newthing"): {},
		}, []string{"internal/newthing matches no row"}},
	}
	for _, tc := range cases {
		var own []string
		for p := range tc.g {
			if strings.HasPrefix(p, module) {
				own = append(own, p)
			}
		}
		slices.Sort(own)
		got := checkArchitecture(tc.g, own, rules)
		for _, w := range tc.want {
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, w) }) {
				t.Errorf("%s: no violation %q in %q", tc.name, w, got)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d violations %q, want %d", tc.name, len(got), got, len(tc.want))
		}
	}
}

// checkArchitecture returns one message per broken rule, in package order.
func checkArchitecture(g importGraph, own []string, rules []importRule) []string {
	var out []string
	for _, pkg := range own {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		var hits []importRule
		for _, r := range rules {
			if matchesAny(r.packages, pkg) {
				hits = append(hits, r)
			}
		}
		switch len(hits) {
		case 0:
			out = append(out, fmt.Sprintf("%s matches no row of the import rules in docs/architecture.md: add one", rel))
			continue
		case 1:
		default:
			out = append(out, fmt.Sprintf("%s matches rows on lines %d and %d of the import rules: one row each", rel, hits[0].line, hits[1].line))
			continue
		}
		r := hits[0]
		if !r.any {
			for _, imp := range g[pkg] {
				if !strings.HasPrefix(imp, module+"/") {
					continue // other modules and the standard library: see never
				}
				if !matchesAny(r.may, imp) {
					out = append(out, fmt.Sprintf("line %d: %s may not import %s", r.line, rel, short(imp)))
				}
			}
		}
		for _, bad := range r.never {
			if chain := findChain(g, pkg, bad); chain != nil {
				for i := range chain {
					chain[i] = short(chain[i])
				}
				out = append(out, fmt.Sprintf("line %d: %s must never link %s: %s", r.line, rel, chain[len(chain)-1], strings.Join(chain, " → ")))
			}
		}
	}
	return out
}

// findChain returns the shortest import chain from pkg to a package that
// matches pattern, or nil.
func findChain(g importGraph, pkg, pattern string) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != pkg && matches(pattern, p) {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, imp := range g[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// moduleDirs are the top-level directories of this module's packages: a
// pattern starting with one of them is a path in this module, any other
// pattern a full import path (net/http, github.com/...).
var moduleDirs = []string{"app", "cmd", "gen", "internal", "policy", "schema", "sql", "tests", "tmpl"}

// matches reports whether import path p matches pattern ("/..." for the
// package and everything below it).
func matches(pattern, p string) bool {
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); slices.Contains(moduleDirs, first) {
		full = module + "/" + pattern
	}
	if base, ok := strings.CutSuffix(full, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == full
}

func matchesAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return matches(pat, p) })
}

func short(p string) string {
	if rel, ok := strings.CutPrefix(p, module+"/"); ok {
		return rel
	}
	return p
}

// readImportRules reads the table between the markers of path.
func readImportRules(path string) ([]importRule, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_, after, ok := bytes.Cut(raw, []byte(rulesBegin))
	table, _, ok2 := bytes.Cut(after, []byte(rulesEnd))
	if !ok || !ok2 {
		return nil, fmt.Errorf("%s: no table between %s and %s", path, rulesBegin, rulesEnd)
	}
	offset := bytes.Count(raw[:len(raw)-len(after)], []byte("\n"))
	rules, err := parseImportRules(bytes.NewReader(table))
	for i := range rules {
		rules[i].line += offset
	}
	return rules, err
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// parseImportRules parses a markdown table: header, separator, then one row
// per rule (packages | may import | must never link | why).
func parseImportRules(r interface{ Read([]byte) (int, error) }) ([]importRule, error) {
	var rules []importRule
	sc := bufio.NewScanner(r)
	line, rows := 0, 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "|") {
			continue
		}
		rows++
		if rows <= 2 { // header and separator
			continue
		}
		cols := strings.Split(strings.Trim(text, "|"), "|")
		if len(cols) != 4 {
			return nil, fmt.Errorf("import rules line %d: %d columns, want 4", line, len(cols))
		}
		spans := func(col string) []string {
			var out []string
			for _, m := range codeSpan.FindAllStringSubmatch(col, -1) {
				out = append(out, m[1])
			}
			return out
		}
		rule := importRule{line: line, packages: spans(cols[0]), may: spans(cols[1]), never: spans(cols[2]),
			any: strings.TrimSpace(cols[1]) == anyPackages}
		if len(rule.packages) == 0 {
			return nil, fmt.Errorf("import rules line %d: no packages", line)
		}
		rules = append(rules, rule)
	}
	if len(rules) == 0 {
		return nil, errors.New("import rules: the table is empty")
	}
	return rules, sc.Err()
}

// loadImportGraph lists the module's packages (own) and everything they
// link, from `go list -deps` in dir. Test files are not part of the graph:
// the rules are about what a build links.
func loadImportGraph(dir string) (importGraph, []string, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %v: %s", err, stderr.String())
	}
	g := importGraph{}
	var own []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		path, rest, _ := strings.Cut(l, "\t")
		mod, imports, _ := strings.Cut(rest, "\t")
		g[path] = strings.Fields(imports)
		if mod == module {
			own = append(own, path)
		}
	}
	slices.Sort(own)
	if len(own) == 0 {
		abs, _ := filepath.Abs(dir)
		return nil, nil, fmt.Errorf("go list in %s: no package of %s", abs, module)
	}
	return g, own, nil
}
