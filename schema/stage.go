package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
)

// Outcome is what the CUE definitions say about a config.
type Outcome struct {
	// Complete is the config with every default filled in, when Issues is
	// empty.
	Complete []byte
	// Partial is, when Issues is not empty, the config with every value in
	// error left out (the paths in Removed), so the later checks can run on
	// the rest with defaults standing in.
	Partial []byte
	// Issues lists the problems; positions are left for the caller's
	// Source, except for CUE errors outside a spec's config block.
	Issues []Issue
	// Removed are the spec paths left out of Partial.
	Removed []string
}

// checker is a CUE context with #Config compiled in it. A cue.Context is
// not safe for concurrent use, so each checker is used by one goroutine
// at a time (taken from and put back into the pool).
type checker struct {
	ctx *cue.Context
	def cue.Value
}

var checkers = sync.Pool{New: func() any {
	ctx := cuecontext.New()
	defs := ctx.CompileString(Definitions, cue.Filename("cellgate.cue"))
	return &checker{ctx: ctx, def: defs.LookupPath(cue.ParsePath("#Config"))}
}}

// Unify unifies a config given as JSON with #Config and reports every
// problem, one Issue per bad field without a position (the caller places
// them in the file the user wrote: the JSON here may be a merge of
// several). When there are problems, Partial holds the rest of the config.
func Unify(configJSON []byte) (Outcome, error) {
	c := checkers.Get().(*checker)
	defer checkers.Put(c)
	if err := c.def.Err(); err != nil {
		return Outcome{}, fmt.Errorf("schema: %w", err)
	}
	cfg := c.ctx.CompileBytes(configJSON, cue.Filename("config.json"))
	if err := cfg.Err(); err != nil {
		return Outcome{Issues: []Issue{{Msg: "not valid JSON: " + err.Error()}}}, nil
	}
	v := c.def.Unify(cfg)
	out := outcome(v, cfg, nil, "")
	for i := range out.Issues {
		out.Issues[i].File, out.Issues[i].Line, out.Issues[i].Col = "", 0, 0
	}
	return out, nil
}

// outcome validates v (the config) as concrete data; extra are errors
// found beside it (outside a spec's config block); root is the field the
// config sits under in its error paths ("" for a bare config).
func outcome(v, user cue.Value, extra error, root string) Outcome {
	err := v.Validate(cue.Concrete(true), cue.Final(), cue.All())
	if err == nil && extra == nil {
		b, merr := v.MarshalJSON()
		if merr == nil {
			return Outcome{Complete: b}
		}
		err = merr
	}
	var all cueerrors.Error
	for _, e := range []error{extra, err} {
		if e != nil {
			all = cueerrors.Append(all, cueerrors.Promote(e, ""))
		}
	}
	is := issues(all, root, user)
	if len(is) == 0 && err != nil {
		is = []Issue{{Msg: err.Error()}}
	}
	var b bytes.Buffer
	var removed []string
	if !partial(&b, v, nil, &removed) {
		b.Reset()
		b.WriteString("{}")
	}
	return Outcome{Partial: b.Bytes(), Issues: is, Removed: removed}
}

// partial writes v as JSON leaving out every value in error or not
// concrete, recording its path. A list with a bad element is left out
// whole (the indices of the rest would shift). It reports whether v
// itself was written.
func partial(b *bytes.Buffer, v cue.Value, path []string, removed *[]string) bool {
	if d, ok := v.Default(); ok {
		v = d
	}
	drop := func() bool {
		*removed = append(*removed, displayPath(path))
		return false
	}
	// A struct or list holding a bad value reports its error too (its
	// kind reads as bottom): only a leaf's error is its own.
	switch kindOf(v) {
	case cue.StructKind:
		it, err := v.Fields()
		if err != nil {
			return drop()
		}
		b.WriteByte('{')
		n := 0
		for it.Next() {
			if !it.Selector().IsString() {
				continue
			}
			mark := b.Len()
			if n > 0 {
				b.WriteByte(',')
			}
			key, _ := json.Marshal(it.Selector().Unquoted())
			b.Write(key)
			b.WriteByte(':')
			if !partial(b, it.Value(), append(path[:len(path):len(path)], it.Selector().Unquoted()), removed) {
				b.Truncate(mark)
				continue
			}
			n++
		}
		b.WriteByte('}')
		return true
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return drop()
		}
		mark := b.Len()
		b.WriteByte('[')
		var inner []string
		for i := 0; it.Next(); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if !partial(b, it.Value(), append(path[:len(path):len(path)], strconv.Itoa(i)), &inner) || len(inner) > 0 {
				b.Truncate(mark)
				return drop()
			}
		}
		b.WriteByte(']')
		return true
	}
	if v.Err() != nil || !v.IsConcrete() {
		return drop()
	}
	j, err := v.MarshalJSON()
	if err != nil {
		return drop()
	}
	b.Write(j)
	return true
}

// kindOf is v's kind, seeing through an error below it: a struct or list
// whose fields still iterate is one.
func kindOf(v cue.Value) cue.Kind {
	k := v.IncompleteKind()
	if k != cue.BottomKind {
		return k
	}
	if it, err := v.Fields(); err == nil && it.Next() {
		return cue.StructKind
	}
	if it, err := v.List(); err == nil && it.Next() {
		return cue.ListKind
	}
	return k
}

// Spec is a CUE spec as loaded: what the definitions say about its config
// block, and where the user wrote each field of it.
type Spec struct {
	Outcome
	// Source locates the fields of the `config: #Config & {…}` block (nil
	// when the spec has another shape).
	Source *Source
	// Root is the whole package's value: the generator finds the
	// definitions routes name (request, query, responses) in it.
	Root cue.Value
}

// FromInstance checks the config value of a loaded CUE spec (one
// package; dir names it in errors) against the definitions: Complete when
// every field is right, otherwise every problem (inside the config block
// placed by its Source, outside it at CUE's position) and the Partial
// config. The error is for a spec that cannot be read at all. Loading the
// files is schema/specload's part: it links CUE's loader and module
// client, which the processes that only check a JSON config do not.
func FromInstance(dir string, inst *build.Instance) (*Spec, error) {
	if err := inst.Err; err != nil {
		return nil, describe(err, cue.Value{})
	}
	ctx := cuecontext.New()
	root := ctx.BuildInstance(inst)
	user, lit, file := userPart(ctx, inst.Files)
	v := root.LookupPath(cue.ParsePath(SpecField))
	if !v.Exists() {
		if err := root.Err(); err != nil {
			return nil, describe(err, user)
		}
		return nil, fmt.Errorf("%s: no `%s` field: the spec must define `%s: #Config & {...}`", dir, SpecField, SpecField)
	}
	s := &Spec{Root: root}
	if lit != nil {
		s.Source = cueSource(displayFile(file), lit)
	}
	// Errors outside the config block are the spec's too; those inside it
	// come from v itself.
	var outside cueerrors.Error
	for _, e := range cueerrors.Errors(root.Validate(cue.All())) {
		if p := e.Path(); len(p) == 0 || p[0] != SpecField {
			outside = cueerrors.Append(outside, e)
		}
	}
	var extra error
	if outside != nil {
		extra = outside
	}
	s.Outcome = outcome(v, user, extra, SpecField)
	for i := range s.Issues {
		is := &s.Issues[i]
		if is.File != "" {
			is.File = displayFile(is.File)
		}
		if is.outside || s.Source == nil {
			continue
		}
		// The config value as a whole (path "", e.g. another declaration
		// gives it another type): Place leaves a pathless issue alone, so
		// one CUE did not place goes at the block's literal.
		if is.Path == "" {
			if line, col, _, ok := s.Source.Locate(""); ok && is.File == "" {
				is.File, is.Line, is.Col = s.Source.File, line, col
			}
			continue
		}
		// The block's literal places the issue when it writes the path (or,
		// for a default, when CUE knows no better place): a field set by
		// another declaration keeps CUE's position.
		if _, _, exact, _ := s.Source.Locate(is.Path); exact || is.File == "" {
			is.File, is.Line, is.Col = "", 0, 0
		}
	}
	s.Source.Place(s.Issues)
	s.Issues = SortIssues(s.Issues)
	return s, nil
}

// displayFile names a spec file as the user would: relative to the
// working directory when it lies below it.
func displayFile(name string) string {
	wd, err := os.Getwd()
	if err != nil || !filepath.IsAbs(name) {
		return name
	}
	if rel, err := filepath.Rel(wd, name); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return name
}

// configLit finds the struct literal of `config: #Config & {...}` and the
// file it is in.
func configLit(files []*ast.File) (*ast.StructLit, string) {
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
			if be, ok := expr.(*ast.BinaryExpr); ok && be.Op.String() == "&" {
				for _, x := range []ast.Expr{be.X, be.Y} {
					if _, ok := x.(*ast.StructLit); ok {
						expr = x
					}
				}
			}
			if sl, ok := expr.(*ast.StructLit); ok {
				return sl, f.Filename
			}
		}
	}
	return nil, ""
}
