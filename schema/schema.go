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
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/load"
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
		return nil, describe(err)
	}
	ctx := cuecontext.New()
	root := ctx.BuildInstance(insts[0])
	if err := root.Err(); err != nil {
		return nil, describe(err)
	}
	v := root.LookupPath(cue.ParsePath(SpecField))
	if !v.Exists() {
		return nil, fmt.Errorf("%s: no `%s` field: the spec must define `%s: #Config & {...}`", dir, SpecField, SpecField)
	}
	return export(v)
}

// Check unifies a config given as JSON with #Config and reports what is
// missing, mistyped or out of range. The server calls it at boot on the
// config it will actually run, after the per-cell file was applied.
func Check(configJSON []byte) error {
	ctx := cuecontext.New()
	defs := ctx.CompileString(Definitions, cue.Filename("cellgate.cue"))
	if err := defs.Err(); err != nil {
		return describe(err)
	}
	cfg := ctx.CompileBytes(configJSON, cue.Filename("config.json"))
	if err := cfg.Err(); err != nil {
		return describe(err)
	}
	v := defs.LookupPath(cue.ParsePath("#Config")).Unify(cfg)
	_, err := export(v)
	return err
}

// export validates v as concrete data and marshals it.
func export(v cue.Value) ([]byte, error) {
	if err := v.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return nil, describe(err)
	}
	b, err := v.MarshalJSON()
	if err != nil {
		return nil, describe(err)
	}
	return b, nil
}

// describe flattens a CUE error list into one message per line, each with
// its position, dropping the #Config prefix so paths read as spec paths.
func describe(err error) error {
	var lines []string
	for _, e := range cueerrors.Errors(err) {
		msg := strings.TrimSpace(cueerrors.Details(e, nil))
		msg = strings.ReplaceAll(msg, "#Config.", "")
		msg = strings.ReplaceAll(msg, SpecField+".", "")
		lines = append(lines, msg)
	}
	if len(lines) == 0 {
		return err
	}
	sort.Strings(lines)
	return &Error{Lines: dedupe(lines)}
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, l := range s {
		if i == 0 || l != s[i-1] {
			out = append(out, l)
		}
	}
	return out
}

// Error lists every problem CUE found, one per line, each naming the spec
// path and, where known, the file and line.
type Error struct {
	// Lines holds one message per problem, sorted.
	Lines []string
}

func (e *Error) Error() string { return strings.Join(e.Lines, "\n") }
