// Command generate turns the CUE spec into the generated service in gen/.
//
// Pipeline: load schema/*.cue and validate its config through the one
// validation path (configload.ValidateSpec: CUE, Go shape, start-up rules,
// names, policy/*.rego; every problem at once with its line in the spec;
// warn is printed) → render tmpl/ →
// compile sql/queries with sqlc → per-cell deploy files and the router's
// slot map (gen/deploy). With -check it changes nothing and exits 1
// when gen/ differs from what it would write (the CI drift check).
//
// Usage:
//
//	go run ./cmd/generate [-spec schema] [-out gen] [-check] [-sqlc=true]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/configload"
	"github.com/cellgate/cellgate/internal/kube"
	"github.com/cellgate/cellgate/internal/mixin"
	"github.com/cellgate/cellgate/schema"
	"github.com/cellgate/cellgate/schema/specload"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	specDir string
	outDir  string
	root    string
	check   bool
	sqlc    bool
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.specDir, "spec", "schema", "directory holding the CUE spec")
	fs.StringVar(&o.outDir, "out", "gen", "directory of the generated code")
	fs.StringVar(&o.root, "root", ".", "repository root (sqlc.yaml, sql/, tools/go.mod)")
	fs.BoolVar(&o.check, "check", false, "write nothing; exit 1 when the output directory is stale")
	fs.BoolVar(&o.sqlc, "sqlc", true, "compile sql/queries with sqlc into <out>/db")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage is printed
		}
		return 2
	}
	files, warns, err := generate(context.Background(), o)
	for _, w := range warns {
		fmt.Fprintln(stderr, "warn:", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if o.check {
		return check(o.outDir, files, stdout, stderr)
	}
	if err := write(o.outDir, files); err != nil {
		fmt.Fprintln(stderr, "generate:", err)
		return 1
	}
	fmt.Fprintf(stdout, "generate: %d files in %s\n", len(files), o.outDir)
	return 0
}

// generate runs the pipeline up to (not including) writing files.
func generate(ctx context.Context, o options) (map[string][]byte, []string, error) {
	sp, err := specload.LoadSpec(o.specDir)
	if err != nil {
		return nil, nil, fmt.Errorf("spec %s is invalid:\n%s", o.specDir, indent(err.Error()))
	}
	cfg, raw, warns, err := configload.ValidateSpec(ctx, sp, configload.Spec)
	if err != nil {
		if ce, ok := errors.AsType[*configload.Error](err); ok {
			return nil, warns, fmt.Errorf("spec %s is refused:\n%s", o.specDir, indent(schema.FormatIssues(ce.Issues)))
		}
		return nil, warns, fmt.Errorf("spec %s is invalid:\n%s", o.specDir, indent(err.Error()))
	}
	api, err := loadAPI(sp.Root, cfg.Routes)
	if err != nil {
		return nil, warns, fmt.Errorf("spec %s: route schemas:\n%s", o.specDir, indent(err.Error()))
	}
	settings, err := schema.SettingsFields()
	if err != nil {
		return nil, warns, fmt.Errorf("settings (schema/settings.cue): %w", err)
	}
	files, err := Render(Input{Config: cfg, JSON: string(raw), API: api, Settings: settings})
	if err != nil {
		return nil, warns, err
	}
	deploy, err := cells.DeployFiles(cfg)
	if err != nil {
		return nil, warns, fmt.Errorf("deploy output: %w", err)
	}
	maps.Copy(files, deploy)
	manifests, err := kube.Files(cfg)
	if err != nil {
		return nil, warns, fmt.Errorf("kubernetes manifests: %w", err)
	}
	maps.Copy(files, manifests)
	monitoring, err := mixin.Files(cfg)
	if err != nil {
		return nil, warns, fmt.Errorf("monitoring mixin: %w", err)
	}
	maps.Copy(files, monitoring)
	if o.sqlc {
		tw, err := checkTenantTables(filepath.Join(o.root, "sql", "migrations"), cfg.Database.TenantTables)
		warns = append(warns, tw...)
		if err != nil {
			return nil, warns, err
		}
		db, err := runSQLC(ctx, o.root)
		if err != nil {
			return nil, warns, err
		}
		maps.Copy(files, db)
	}
	return files, warns, nil
}

// runSQLC compiles the queries in a scratch copy of sqlc.yaml and sql/, so
// the pipeline can diff its output before anything in gen/ changes.
func runSQLC(ctx context.Context, root string) (map[string][]byte, error) {
	tmp, err := os.MkdirTemp("", "cellgate-sqlc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, dir := range []string{"sql/migrations", "sql/queries"} {
		if err := os.CopyFS(filepath.Join(tmp, dir), os.DirFS(filepath.Join(root, dir))); err != nil {
			return nil, fmt.Errorf("sqlc: copy %s: %w", dir, err)
		}
	}
	conf, err := os.ReadFile(filepath.Join(root, "sqlc.yaml"))
	if err != nil {
		return nil, fmt.Errorf("sqlc: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "sqlc.yaml"), conf, 0o644); err != nil {
		return nil, err
	}
	tools, err := filepath.Abs(filepath.Join(root, "tools"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "sqlc", "generate", "-f", filepath.Join(tmp, "sqlc.yaml"))
	cmd.Dir = tools
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("sqlc generate failed: %v\n%s", err, indent(string(out)))
	}
	files, err := readTree(os.DirFS(filepath.Join(tmp, "gen")))
	if err != nil {
		return nil, fmt.Errorf("sqlc: read output: %w", err)
	}
	for name, b := range files {
		files[name] = retitle(b)
	}
	return files, nil
}

// retitle gives sqlc's files the generator's header: one tool owns gen/.
func retitle(b []byte) []byte {
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	if bytes.HasPrefix(first, []byte("// Code generated by sqlc")) {
		return append([]byte(Header+"\n// Compiled by sqlc from sql/queries.\n"), rest...)
	}
	return b
}

// check compares want with the files under dir and prints a short summary.
func check(dir string, want map[string][]byte, stdout, stderr io.Writer) int {
	have, err := readTree(os.DirFS(dir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stderr, "generate -check:", err)
		return 1
	}
	var changed, missing, extra []string
	for name, b := range want {
		old, ok := have[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case !bytes.Equal(old, b):
			changed = append(changed, name)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			extra = append(extra, name)
		}
	}
	if len(changed)+len(missing)+len(extra) == 0 {
		fmt.Fprintf(stdout, "generate -check: %s is up to date (%d files)\n", dir, len(want))
		return 0
	}
	fmt.Fprintf(stderr, "generate -check: %s is stale: %d changed, %d missing, %d extra; run `make generate`\n",
		dir, len(changed), len(missing), len(extra))
	for _, group := range []struct {
		tag   string
		names []string
	}{{"changed", changed}, {"missing", missing}, {"extra", extra}} {
		sort.Strings(group.names)
		for _, n := range group.names {
			fmt.Fprintf(stderr, "  %s: %s\n", group.tag, filepath.Join(dir, n))
		}
	}
	return 1
}

// write replaces the generated tree: new files are written, files the
// generator no longer produces are removed.
func write(dir string, files map[string][]byte) error {
	have, err := readTree(os.DirFS(dir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for name := range have {
		if _, ok := files[name]; !ok {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		path := filepath.Join(dir, name)
		if old, ok := have[name]; ok && bytes.Equal(old, b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
