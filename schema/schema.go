// Package schema checks a cellgate spec written in CUE, and a config given
// as JSON, against the same definitions.
//
// The definitions (cellgate.cue) are embedded so the server can re-check its
// final config at boot with exactly the rules the generator used. Reading a
// spec's files from disk is schema/specload's part, which only the generator
// and the operator tools link. Check, Complete, Unify and FromInstance are
// pure functions of their inputs and safe for concurrent use.
package schema

import (
	_ "embed"
	"regexp"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
)

// Definitions is the shape every spec obeys: the source of cellgate.cue
// (the template's) followed by settings.cue (the service's own #Settings),
// its package clause dropped so the two compile as one file.
var Definitions = templateDefinitions + "\n" + packageClause.ReplaceAllString(SettingsSource, "")

//go:embed cellgate.cue
var templateDefinitions string

// SettingsSource is the source of settings.cue: the service's own settings
// (#Settings, the config's `settings` block). The service owns the file;
// it is embedded here so the server checks its settings at boot with the
// rules the generator used.
//
//go:embed settings.cue
var SettingsSource string

// packageClause matches settings.cue's package clause.
var packageClause = regexp.MustCompile(`(?m)^package [A-Za-z_][A-Za-z0-9_]*[ \t]*$`)

// SpecField is the top-level field of the app spec that holds the config.
const SpecField = "config"

// userPart is the user's own struct of `config: #Config & {...}`, built
// from the source alone (without #Config), so a failing path can be read
// as the user wrote it, with the literal and its file name. A zero Value
// when the spec has another shape.
func userPart(ctx *cue.Context, files []*ast.File) (cue.Value, *ast.StructLit, string) {
	sl, file := configLit(files)
	if sl == nil {
		return cue.Value{}, nil, ""
	}
	return ctx.BuildExpr(sl), sl, file
}

// Check unifies a config given as JSON with #Config and reports what is
// missing, mistyped or out of range. The server calls it at boot on the
// config it will actually run, after the per-cell file was applied.
func Check(configJSON []byte) error {
	_, err := Complete(configJSON, "config.json")
	return err
}

// Complete unifies a config given as JSON with #Config, so every field the
// JSON omits (also inside list entries) takes the schema's default, and
// returns the complete config as JSON; errors are an *Error placed in
// configJSON, which name labels. A per-cell file's list entry that names
// only some fields gets the others from here.
func Complete(configJSON []byte, name string) ([]byte, error) {
	out, err := Unify(configJSON)
	if err != nil {
		return nil, err
	}
	if len(out.Issues) > 0 {
		JSONSource(name, configJSON).Place(out.Issues)
		return nil, &Error{Issues: SortIssues(out.Issues)}
	}
	return out.Complete, nil
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
