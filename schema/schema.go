// Package schema loads a cellgate spec written in CUE and checks a config
// against the same definitions.
//
// The definitions (cellgate.cue) are embedded so the server can re-check its
// final config at boot with exactly the rules the generator used. Load and
// Check are pure functions of their inputs and safe for concurrent use.
package schema

import (
	_ "embed"
	"fmt"

	"path/filepath"
	"sort"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/token"
)

// Definitions is the source of cellgate.cue, the shape every spec obeys.
//
//go:embed cellgate.cue
var Definitions string

// SpecField is the top-level field of the app spec that holds the config.
const SpecField = "config"

// Load reads every .cue file in dir (one package), unifies them, checks that
// the `config` value is complete and valid, and returns it as JSON.
// Errors carry file:line positions.
func Load(dir string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.cue"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .cue files", dir)
	}
	sort.Strings(files)
	args := make([]string, len(files))
	for i, f := range files {
		args[i] = "./" + filepath.Base(f)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	insts := load.Instances(args, &load.Config{Dir: abs})
	if len(insts) != 1 {
		return nil, fmt.Errorf("%s: expected one CUE package, found %d", dir, len(insts))
	}
	if err := insts[0].Err; err != nil {
		return nil, describe(err, cue.Value{})
	}
	ctx := cuecontext.New()
	root := ctx.BuildInstance(insts[0])
	user := userPart(ctx, insts[0].Files)
	if err := root.Err(); err != nil {
		return nil, describe(err, user)
	}
	v := root.LookupPath(cue.ParsePath(SpecField))
	if !v.Exists() {
		return nil, fmt.Errorf("%s: no `%s` field: the spec must define `%s: #Config & {...}`", dir, SpecField, SpecField)
	}
	return export(v, user)
}

// userPart is the user's own struct of `config: #Config & {...}`, built
// from the source alone (without #Config), so a failing path can be read
// as the user wrote it. A zero Value when the spec has another shape.
func userPart(ctx *cue.Context, files []*ast.File) cue.Value {
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.Field)
			if !ok {
				continue
			}
			if name, _, _ := ast.LabelName(fd.Label); name != SpecField {
				continue
			}
			expr := fd.Value
			if be, ok := expr.(*ast.BinaryExpr); ok && be.Op == token.AND {
				for _, x := range []ast.Expr{be.X, be.Y} {
					if _, ok := x.(*ast.StructLit); ok {
						expr = x
					}
				}
			}
			if sl, ok := expr.(*ast.StructLit); ok {
				return ctx.BuildExpr(sl)
			}
		}
	}
	return cue.Value{}
}

// Check unifies a config given as JSON with #Config and reports what is
// missing, mistyped or out of range. The server calls it at boot on the
// config it will actually run, after the per-cell file was applied.
func Check(configJSON []byte) error { return CheckNamed(configJSON, "config.json") }

// CheckNamed is Check with the name positions in configJSON are reported
// under.
func CheckNamed(configJSON []byte, name string) error {
	_, err := Complete(configJSON, name)
	return err
}

// Complete unifies a config given as JSON with #Config, so every field the
// JSON omits (also inside list entries) takes the schema's default, and
// returns the complete config as JSON; errors are CheckNamed's. A per-cell
// file's list entry that names only some fields gets the others from here.
func Complete(configJSON []byte, name string) ([]byte, error) {
	ctx := cuecontext.New()
	defs := ctx.CompileString(Definitions, cue.Filename("cellgate.cue"))
	if err := defs.Err(); err != nil {
		return nil, describe(err, cue.Value{})
	}
	cfg := ctx.CompileBytes(configJSON, cue.Filename(name))
	if err := cfg.Err(); err != nil {
		return nil, describe(err, cue.Value{})
	}
	v := defs.LookupPath(cue.ParsePath("#Config")).Unify(cfg)
	return export(v, cfg)
}

// export validates v as concrete data and marshals it.
func export(v, user cue.Value) ([]byte, error) {
	if err := v.Validate(cue.Concrete(true), cue.Final(), cue.All()); err != nil {
		return nil, describe(err, user)
	}
	b, err := v.MarshalJSON()
	if err != nil {
		return nil, describe(err, user)
	}
	return b, nil
}

// describe turns a CUE error into an *Error of Issues; root is the
// top-level field the config sits under ("config" for a spec).
func describe(err error, user cue.Value) error {
	is := issues(err, SpecField, user)
	if len(is) == 0 {
		return err
	}
	return &Error{Issues: is}
}

// Error lists every problem CUE found, one Issue per bad field, ordered by
// file:line, each naming the spec path.
type Error struct {
	// Issues holds one entry per problem, sorted by position.
	Issues []Issue
}

func (e *Error) Error() string { return FormatIssues(e.Issues) }
