package schema

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"
)

// MaxIssues caps how many problems one report lists; the rest are counted.
const MaxIssues = 50

// Issue is one problem with a config: the spec path it is about, what is
// wrong in words a user acts on, and where the user wrote it (file:line:col,
// empty when unknown).
type Issue struct {
	// Path is the spec path in index style: jobs.kinds[1].args[2].type.
	Path string
	// Msg says what is wrong and what is accepted.
	Msg string
	// File, Line and Col locate the user's value; File is empty when unknown.
	// For a field the user did not write (Default) they locate its nearest
	// written ancestor.
	File      string
	Line, Col int
	// Default is true when the user did not write the field: the value at
	// fault is a default (the schema's or, for a per-cell file, the spec's).
	Default bool
	// outside is true for a CUE error outside a spec's config block: it
	// keeps CUE's position.
	outside bool
}

// Pos is "file:line:col", or "" when the position is unknown.
func (i Issue) Pos() string {
	switch {
	case i.File == "":
		return ""
	case i.Col == 0:
		return fmt.Sprintf("%s:%d", i.File, i.Line)
	}
	return fmt.Sprintf("%s:%d:%d", i.File, i.Line, i.Col)
}

// String is "path: msg (file:line:col)".
func (i Issue) String() string {
	s := i.Path + ": " + i.Msg
	switch {
	case i.Path == "":
		s = i.Msg
	case strings.HasPrefix(i.Msg, "("): // a label of the entry: "(shard-1): …"
		s = i.Path + " " + i.Msg
	}
	switch p := i.Pos(); {
	case i.Default && p != "":
		s += " (default, in " + p + ")"
	case i.Default:
		s += " (default)"
	case p != "":
		s += " (" + p + ")"
	}
	return s
}

// SortIssues orders issues by file, line and column, then path, and drops
// exact duplicates; issues without a position come last.
func SortIssues(is []Issue) []Issue {
	slices.SortStableFunc(is, func(x, y Issue) int {
		return cmp.Or(
			falseFirst(x.File == "", y.File == ""),
			cmp.Compare(x.File, y.File),
			cmp.Compare(x.Line, y.Line),
			cmp.Compare(x.Col, y.Col),
			cmp.Compare(x.Path, y.Path),
			falseFirst(x.Default, y.Default),
			cmp.Compare(x.Msg, y.Msg),
		)
	})
	return slices.Compact(is)
}

// falseFirst compares two bools, false before true.
func falseFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// FormatIssues renders up to MaxIssues issues, one per line, and counts
// the rest.
func FormatIssues(is []Issue) string {
	var b strings.Builder
	for i, v := range is {
		if i > 0 {
			b.WriteByte('\n')
		}
		if i == MaxIssues {
			if n := len(is) - MaxIssues; n == 1 {
				b.WriteString("… and 1 more error")
			} else {
				fmt.Fprintf(&b, "… and %d more errors", n)
			}
			break
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// definitionsMu guards definitions: a cue.Context is not safe for
// concurrent use, and Unify runs on many goroutines (the server's checks,
// parallel tests, the fuzzer's workers). issues holds it while it reads
// the definitions.
var definitionsMu sync.Mutex

// definitions is cellgate.cue compiled once, for describing constraints;
// read it only under definitionsMu.
var definitions = sync.OnceValues(func() (cue.Value, error) {
	ctx := cuecontext.New()
	v := ctx.CompileString(Definitions, cue.Filename("cellgate.cue"))
	return v, v.Err()
})

// named maps the source text of a named constraint in cellgate.cue to how a
// user should read it: a regex failure on #Duration says "is not a
// duration", not the regex.
var named = map[string]string{
	"#Duration":         `is not a duration; write e.g. "30s"`,
	"#PositiveDuration": `is not a duration above zero; write e.g. "30s"`,
	"#SlotSpec":         `is not a slot spec; write one slot "42" or a range "0-8191" (no leading zeros, no spaces)`,
	"#Name":             `is not a name; use lower-case letters, digits, _ and -, starting with a letter (at most 63)`,
	"#EnvVar":           `is not an environment variable name; use upper-case letters, digits and _`,
}

// regexForm maps a regex's source (as CUE prints it) to the named form.
var regexForm = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	defs, err := definitions()
	if err != nil {
		return out
	}
	for name, form := range named {
		v := defs.LookupPath(cue.ParsePath(name))
		if !v.Exists() {
			continue
		}
		out[constraintText(v)] = form
	}
	return out
})

// constraintText is the printed bound of a regex-only value: =~"...".
func constraintText(v cue.Value) string {
	op, args := v.Expr()
	if op == cue.AndOp && len(args) > 0 {
		return constraintText(args[len(args)-1])
	}
	if op == cue.RegexMatchOp && len(args) == 1 {
		s, _ := args[0].String()
		return "=~" + strconv.Quote(s)
	}
	if op == cue.NotRegexMatchOp && len(args) == 1 {
		s, _ := args[0].String()
		return "!~" + strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// issues turns CUE's error list into one Issue per bad field. CUE reports a
// failed disjunction once per alternative ("conflicting values 4 and 0",
// "2 errors in empty disjunction") including the alternative that is only
// a default the user never wrote; this keeps the errors that describe the
// user's value, and words them from the schema: "must be one of …",
// "must be ≥ 1", "is not a duration".
//
// user is the config as the user wrote it (without #Config), used to read
// the value at a failing path; a zero Value falls back to CUE's text.
func issues(err error, root string, user cue.Value) []Issue {
	definitionsMu.Lock()
	defer definitionsMu.Unlock()
	type field struct {
		path       []string
		bounds     []string
		conflicts  bool
		got        string
		notAllowed bool
		outside    bool
		other      []string
		pos        token.Position
	}
	byPath := map[string]*field{}
	var order []string
	for _, e := range cueerrors.Errors(err) {
		sel := e.Path()
		outside := false
		switch {
		case len(sel) > 0 && sel[0] == "#Config":
			sel = sel[1:]
		case root == "":
		case len(sel) > 0 && sel[0] == root:
			sel = sel[1:]
		default:
			outside = true
		}
		key := displayPath(sel)
		f := byPath[key]
		if f == nil {
			f = &field{path: sel, outside: outside}
			byPath[key] = f
			order = append(order, key)
		}
		if p := userPos(e); p.IsValid() && !f.pos.IsValid() {
			f.pos = p
		}
		format, args := e.Msg()
		switch {
		case strings.Contains(format, "errors in empty disjunction"):
		case strings.HasPrefix(format, "field not allowed"):
			f.notAllowed = true
		case strings.HasPrefix(format, "invalid value %v (out of bound %s)") && len(args) == 2:
			f.got = oneLine(fmt.Sprint(args[0]))
			f.bounds = append(f.bounds, fmt.Sprint(args[1]))
		case strings.HasPrefix(format, "conflicting values %s and %s") && len(args) >= 2:
			f.conflicts = true
			if f.got == "" {
				f.got = oneLine(fmt.Sprint(args[1]))
			}
		default:
			f.other = append(f.other, fmt.Sprintf(format, args...))
		}
	}
	var out []Issue
	for _, key := range order {
		f := byPath[key]
		if !f.notAllowed && len(f.bounds) == 0 && !f.conflicts && len(f.other) == 0 {
			continue // only a disjunction summary: its alternatives speak for it
		}
		var got cue.Value
		if user.Exists() && !f.outside {
			if g := user.LookupPath(selectorPath(f.path)); g.Exists() && g.IsConcrete() {
				got = g
				f.got = gotText(g)
			}
		}
		var alts []cue.Value
		if !f.outside {
			alts = schemaAt(f.path)
		}
		known := len(alts) > 0
		var msg string
		switch {
		case f.notAllowed:
			msg = "unknown field; the schema (schema/cellgate.cue) has no such setting here"
		case known && got.Exists() && acceptsAny(alts, got):
			// The user's value is fine for the field itself: the error came
			// from a default alternative of an enclosing value (for example a
			// default list's entry), not from anything the user wrote.
			continue
		case len(f.bounds) > 0:
			msg = describeBounds(f.bounds, f.got)
		case f.conflicts && known:
			msg = describeField(alts, f.got)
		case len(f.other) > 0:
			msg = strings.Join(f.other, "; ")
		default:
			msg = "invalid value " + f.got
		}
		is := Issue{Path: key, Msg: msg, outside: f.outside}
		if f.pos.IsValid() {
			is.File, is.Line, is.Col = f.pos.Filename, f.pos.Line, f.pos.Column
		}
		out = append(out, is)
	}
	return SortIssues(dropShadowed(out))
}

// dropShadowed drops an issue about a list or struct when another issue
// names a path inside it: the inner one says what is wrong, the outer one
// is CUE comparing the whole value with a default alternative
// ("incompatible list lengths (0 and 1)").
func dropShadowed(is []Issue) []Issue {
	out := is[:0]
	for _, a := range is {
		shadowed := false
		for _, b := range is {
			if len(b.Path) > len(a.Path) && strings.HasPrefix(b.Path, a.Path) && (b.Path[len(a.Path)] == '.' || b.Path[len(a.Path)] == '[') {
				shadowed = true
				break
			}
		}
		if !shadowed {
			out = append(out, a)
		}
	}
	return out
}

// userPos picks the position of the user's value: the first input position
// that is not in the embedded definitions.
func userPos(e cueerrors.Error) token.Position {
	cands := append([]token.Pos{e.Position()}, e.InputPositions()...)
	var best token.Position
	for _, p := range cands {
		pp := p.Position()
		if !pp.IsValid() || strings.HasSuffix(pp.Filename, "cellgate.cue") {
			continue
		}
		// The whole-file position (1:1 of a JSON document) says nothing.
		if pp.Line == 1 && pp.Column == 1 && len(cands) > 1 {
			continue
		}
		if !best.IsValid() || pp.Offset > best.Offset {
			best = pp
		}
	}
	return best
}

// displayPath joins CUE selectors in the spec's path style: list indices
// in brackets (jobs.kinds[1].args[2].type), as the policy writes them.
func displayPath(sel []string) string {
	var b strings.Builder
	for _, s := range sel {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// selectorPath turns config selectors into a cue.Path (indices as
// indices).
func selectorPath(sel []string) cue.Path {
	ps := make([]cue.Selector, len(sel))
	for i, s := range sel {
		if n, err := strconv.Atoi(s); err == nil {
			ps[i] = cue.Index(n)
			continue
		}
		ps[i] = cue.Str(s)
	}
	return cue.MakePath(ps...)
}

// schemaAt finds the definitions a field at a config path may have: one
// per alternative of every disjunction on the way (a list with a default
// list has two), list indices read as "any element".
func schemaAt(sel []string) []cue.Value {
	defs, err := definitions()
	if err != nil {
		return nil
	}
	cur := []cue.Value{defs.LookupPath(cue.MakePath(cue.Def("#Config")))}
	for _, s := range sel {
		var next []cue.Value
		for _, v := range cur {
			for _, alt := range alternatives(v) {
				var c cue.Value
				if _, err := strconv.Atoi(s); err == nil {
					if alt.IncompleteKind() != cue.ListKind {
						continue
					}
					c = alt.LookupPath(cue.MakePath(cue.AnyIndex))
				} else {
					if alt.IncompleteKind() != cue.StructKind {
						continue
					}
					c = alt.LookupPath(cue.MakePath(cue.Str(s)))
				}
				if c.Exists() {
					next = append(next, c)
				}
			}
		}
		cur = next
	}
	return cur
}

// alternatives splits a disjunction into its alternatives.
func alternatives(v cue.Value) []cue.Value {
	if op, args := v.Expr(); op == cue.OrOp {
		var out []cue.Value
		for _, a := range args {
			out = append(out, alternatives(a)...)
		}
		return out
	}
	return []cue.Value{v}
}

// acceptsAny reports whether any definition of the field accepts got.
// got is re-read as text in a context of its own: CUE unifies values of
// different contexts, and the text form drops got's own constraints.
func acceptsAny(alts []cue.Value, got cue.Value) bool {
	g := cuecontext.New().CompileString(fmt.Sprint(got))
	if g.Err() != nil {
		return false
	}
	for _, a := range alts {
		if a.Unify(g).Validate(cue.Concrete(true)) == nil {
			return true
		}
	}
	return false
}

// describeBounds words CUE's bounds (">=1", "<=1024", =~"…") for people.
func describeBounds(bounds []string, got string) string {
	forms := regexForm()
	var parts []string
	for _, b := range bounds {
		if form, ok := forms[b]; ok {
			return got + " " + form
		}
		switch {
		case strings.HasPrefix(b, ">="):
			parts = append(parts, "≥ "+b[2:])
		case strings.HasPrefix(b, "<="):
			parts = append(parts, "≤ "+b[2:])
		case strings.HasPrefix(b, ">"):
			parts = append(parts, "> "+b[1:])
		case strings.HasPrefix(b, "<"):
			parts = append(parts, "< "+b[1:])
		case strings.HasPrefix(b, "=~"):
			return "must match " + b[2:] + "; got " + got
		case strings.HasPrefix(b, "!~"):
			return "must not match " + b[2:] + "; got " + got
		default:
			parts = append(parts, b)
		}
	}
	sort.Strings(parts)
	return "must be " + strings.Join(parts, " and ") + "; got " + got
}

// describeField words a failed field from its definition: the alternatives
// of an enum, or the kind it must have.
func describeField(fields []cue.Value, got string) string {
	field := fields[0]
	if alts := enum(field); len(alts) > 0 {
		if len(alts) == 1 {
			return "must be " + alts[0] + "; got " + got
		}
		return "must be one of " + strings.Join(alts, ", ") + "; got " + got
	}
	k := field.IncompleteKind()
	return "must be " + kindName(k) + "; got " + got
}

// enum lists a disjunction of concrete values in schema order.
func enum(v cue.Value) []string {
	op, args := v.Expr()
	if op != cue.OrOp {
		if v.IsConcrete() && v.Kind() != cue.StructKind && v.Kind() != cue.ListKind {
			return []string{fmt.Sprint(v)}
		}
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, a := range args {
		sub := enum(a)
		if sub == nil {
			return nil
		}
		for _, s := range sub {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func kindName(k cue.Kind) string {
	switch {
	case k == cue.StringKind:
		return "a string"
	case k == cue.IntKind:
		return "an integer"
	case k&cue.NumberKind == k:
		return "a number"
	case k == cue.BoolKind:
		return "true or false"
	case k == cue.ListKind:
		return "a list"
	case k == cue.StructKind:
		return "an object"
	}
	return k.String()
}

// gotText is the user's value as a message quotes it: scalars as written,
// an object or a list by kind (CUE prints them over several lines, and an
// issue is one line).
func gotText(v cue.Value) string {
	switch v.Kind() {
	case cue.StructKind:
		return "an object"
	case cue.ListKind:
		return "a list"
	}
	return oneLine(fmt.Sprint(v))
}

// oneLine folds a value CUE printed over several lines onto one.
func oneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
