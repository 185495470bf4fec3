package main

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload"
	"github.com/cellgate/cellgate/schema"
)

// randomSpec builds a random config that the spec language allows: kinds
// with typed args and unique_by, routes with path parameters, shards split
// evenly or by explicit ranges, one or two cells, a tenancy source.
func randomSpec(r *rand.Rand) map[string]any {
	var base map[string]any
	if err := json.Unmarshal([]byte(spec.JSON), &base); err != nil {
		panic(err)
	}
	words := []string{"send", "mail", "bill", "sync", "index", "order", "ping", "report", "export", "welcome", "audit", "notify"}
	types := []string{"string", "int64", "bool", "float64", "time"}
	argNames := []string{"account_id", "email", "at", "count", "ok", "ratio", "user_id", "url", "name", "note"}
	kinds := []any{}
	seen := map[string]bool{}
	for range r.IntN(5) {
		name := words[r.IntN(len(words))]
		if r.IntN(2) == 0 {
			name += "_" + words[r.IntN(len(words))]
		}
		if seen[config.GoName(name)] || seen[config.GoName(name)+"Args"] || strings.HasSuffix(name, "_args") {
			continue
		}
		seen[config.GoName(name)], seen[config.GoName(name)+"Args"] = true, true
		args := []any{}
		var names []string
		for _, i := range r.Perm(len(argNames))[:r.IntN(4)] {
			args = append(args, map[string]any{"name": argNames[i], "type": types[r.IntN(len(types))]})
			names = append(names, argNames[i])
		}
		k := map[string]any{"name": name, "args": args, "max_attempts": 1 + r.IntN(100), "timeout": fmt.Sprintf("%ds", 1+r.IntN(600)), "concurrency": r.IntN(5)}
		if len(names) > 0 && r.IntN(2) == 0 {
			k["unique_by"] = names[:1+r.IntN(len(names))]
		}
		kinds = append(kinds, k)
	}
	jobs := base["jobs"].(map[string]any)
	jobs["kinds"] = kinds
	segs := []string{"orders", "accounts", "items", "v1", "admin2", "reports"}
	routes := []any{}
	handlers := map[string]bool{}
	keys := map[string]bool{}
	for i := range 1 + r.IntN(6) {
		var path []string
		params := 0
		for range 1 + r.IntN(3) {
			if r.IntN(3) == 0 {
				params++
				path = append(path, fmt.Sprintf("{p%d}", params))
			} else {
				path = append(path, segs[r.IntN(len(segs))])
			}
		}
		method := []string{"GET", "POST", "PUT", "PATCH", "DELETE"}[r.IntN(5)]
		p := "/" + strings.Join(path, "/")
		shape := method + " " + strings.Join(slices.Collect(func(yield func(string) bool) {
			for _, s := range path {
				if strings.HasPrefix(s, "{") {
					s = ":"
				}
				if !yield(s) {
					return
				}
			}
		}), "/")
		h := fmt.Sprintf("Handle%d", i)
		if keys[shape] || handlers[h] {
			continue
		}
		keys[shape], handlers[h] = true, true
		routes = append(routes, map[string]any{"method": method, "path": p, "handler": h, "public": false})
	}
	base["routes"] = routes
	nShards := 1 + r.IntN(4)
	var shards []any
	explicit := r.IntN(2) == 0
	for i := range nShards {
		s := map[string]any{"name": fmt.Sprintf("shard-%d", i), "dsn_env": fmt.Sprintf("SHARD_%d_DSN", i), "max_conns": 1 + r.IntN(50)}
		if explicit {
			lo, hi := i*16384/nShards, (i+1)*16384/nShards-1
			s["slots"] = []any{fmt.Sprintf("%d-%d", lo, hi)}
		}
		shards = append(shards, s)
	}
	base["database"].(map[string]any)["shards"] = shards
	if nShards == 2 && explicit && r.IntN(2) == 0 {
		base["cells"] = []any{
			map[string]any{"name": "cell-a", "url": "http://10.0.0.1:8080", "slots": []any{"0-8191"}},
			map[string]any{"name": "cell-b", "url": "https://cell-b.internal", "slots": []any{"8192-16383"}},
		}
	}
	tenancy := base["tenancy"].(map[string]any)
	tenancy["source"] = []string{"header", "subdomain", "jwt", "session"}[r.IntN(4)]
	if tenancy["source"] == "jwt" {
		// The jwt source needs exactly one key setting; the base spec
		// names none.
		jwt := tenancy["jwt"].(map[string]any)
		jwt["key_env"] = "CELLGATE_JWT_KEY"
	}
	if r.IntN(2) == 0 {
		tenancy["rate_per_second"], tenancy["burst"] = 1+r.IntN(100), 1+r.IntN(100)
	}
	return base
}

// exportData maps the module's and Echo's packages to compiled export
// data, so go/types checks rendered files without a build per spec.
func exportData(t *testing.T) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}",
		"github.com/cellgate/cellgate/internal/config", "github.com/cellgate/cellgate/internal/jobs", "github.com/labstack/echo/v4", "time").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, f, ok := strings.Cut(line, "\t"); ok && f != "" {
			files[p] = f
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return openFile(f)
	})
}

// TestRandomSpecsRenderCodeThatTypeChecks is the generator's property: 200
// random specs, each accepted by the one validation path, render a gen/
// whose three packages type-check against the module, and whose defaults
// (with each cell's generated deploy file) pass `server check`.
func TestRandomSpecsRenderCodeThatTypeChecks(t *testing.T) {
	imp := exportData(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(19, 2026))
	for i := range 200 {
		s := randomSpec(r)
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		complete, err := schema.Complete(raw, "random.json")
		if err != nil {
			t.Fatalf("spec %d: schema: %v\n%s", i, err, raw)
		}
		cfg, _, err := configload.Validate(ctx, complete, "random.json", configload.Spec)
		if err != nil {
			t.Fatalf("spec %d is refused; the generator must produce valid specs: %v\n%s", i, err, raw)
		}
		files, err := Render(Input{Config: cfg, JSON: string(complete)})
		if err != nil {
			t.Fatalf("spec %d: render: %v", i, err)
		}
		typeCheck(t, imp, i, files)
		deploy, err := cells.DeployFiles(cfg)
		if err != nil {
			t.Fatalf("spec %d: deploy: %v", i, err)
		}
		for name, overlay := range deploy {
			if name == cells.DeployDir+"/"+cells.SlotMapFile {
				continue
			}
			merged, err := config.Merge(complete, overlay)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := configload.Validate(ctx, config.Indent(merged), name, configload.Final); err != nil {
				t.Fatalf("spec %d: %s does not pass server check: %v\n%s", i, name, err, raw)
			}
		}
	}
}

// typeCheck checks gen/spec, gen/jobkinds and gen/api of one render.
func typeCheck(t *testing.T, imp types.Importer, i int, files map[string][]byte) {
	t.Helper()
	for _, name := range []string{"spec/spec.go", "jobkinds/jobkinds.go", "api/api.go"} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, files[name], 0)
		if err != nil {
			t.Fatalf("spec %d: %s: %v", i, name, err)
		}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check("github.com/cellgate/cellgate/gen/"+strings.Split(name, "/")[0], fset, []*ast.File{f}, nil); err != nil {
			t.Fatalf("spec %d: %s does not type-check: %v\n%s", i, name, err, files[name])
		}
	}
}

func openFile(name string) (io.ReadCloser, error) { return os.Open(name) }
