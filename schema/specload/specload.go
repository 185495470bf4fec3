// Package specload reads a cellgate spec (the .cue files of one directory)
// from disk with CUE's loader and hands it to schema for checking.
//
// It is apart from schema because CUE's loader links the CUE module
// registry client (cuelang.org/go/mod/...), which only the generator and
// the operator tools need: the server and the router check a JSON config
// with schema alone (the import rules in docs/architecture.md hold it).
// Load and LoadSpec are safe for concurrent use.
package specload

import (
	"fmt"
	"path/filepath"
	"sort"

	"cuelang.org/go/cue/load"

	"github.com/cellgate/cellgate/schema"
)

// Load reads every .cue file in dir (one package), unifies them, checks that
// the `config` value is complete and valid, and returns it as JSON.
// Errors carry file:line positions (LoadSpec has the details).
func Load(dir string) ([]byte, error) {
	s, err := LoadSpec(dir)
	if err != nil {
		return nil, err
	}
	if len(s.Issues) > 0 {
		return nil, &schema.Error{Issues: s.Issues}
	}
	return s.Complete, nil
}

// LoadSpec reads every .cue file in dir (one package) and checks its
// config value against the definitions (schema.FromInstance). The error is
// for a spec that cannot be read at all; problems with its content are the
// Spec's Issues.
func LoadSpec(dir string) (*schema.Spec, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.cue"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .cue files", dir)
	}
	sort.Strings(files)
	// The files by name, so the spec is exactly this directory's files.
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
	return schema.FromInstance(dir, insts[0])
}
