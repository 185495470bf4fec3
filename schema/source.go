package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
)

// Source locates spec paths in the file the user wrote: a per-cell JSON
// file, or the `config: #Config & {…}` block of a CUE spec. Errors found on
// a merged or completed document are placed by path through it, so they
// name the user's own file and line, never a line of a document the user
// never saw. A nil *Source locates nothing.
type Source struct {
	// File names the file as the user gave it.
	File string
	pos  map[string]spot
}

// spot is a 1-based line and column.
type spot struct{ line, col int }

// JSONSource indexes a JSON document by spec path: every value's position
// (an object or a list at its opening bracket). A document that is not
// valid JSON is indexed as far as it reads.
func JSONSource(file string, raw []byte) *Source {
	s := &Source{File: file, pos: map[string]spot{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	lines := lineStarts(raw)
	var value func(path string) bool
	value = func(path string) bool {
		off := skipSpace(raw, int(dec.InputOffset()))
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		s.pos[path] = lines.spot(off)
		d, ok := tok.(json.Delim)
		if !ok {
			return true
		}
		switch d {
		case '{':
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := kt.(string)
				if !value(joinKey(path, key)) {
					return false
				}
			}
		case '[':
			for i := 0; dec.More(); i++ {
				if !value(path + "[" + strconv.Itoa(i) + "]") {
					return false
				}
			}
		}
		_, err = dec.Token()
		return err == nil
	}
	value("")
	return s
}

// cueSource indexes the struct literal of a spec's config block by spec
// path, from the CUE syntax tree (positions as CUE reports them).
func cueSource(file string, lit *ast.StructLit) *Source {
	s := &Source{File: file, pos: map[string]spot{}}
	var expr func(path string, x ast.Expr)
	expr = func(path string, x ast.Expr) {
		if p := x.Pos(); p.IsValid() {
			if _, seen := s.pos[path]; !seen {
				s.pos[path] = spot{p.Line(), p.Column()}
			}
		}
		switch v := x.(type) {
		case *ast.StructLit:
			for _, d := range v.Elts {
				f, ok := d.(*ast.Field)
				if !ok {
					continue
				}
				name, _, err := ast.LabelName(f.Label)
				if err != nil {
					continue
				}
				expr(joinKey(path, name), f.Value)
			}
		case *ast.ListLit:
			for i, e := range v.Elts {
				expr(path+"["+strconv.Itoa(i)+"]", e)
			}
		case *ast.BinaryExpr:
			// #Name & {…}: the literal side holds the user's fields.
			expr(path, v.X)
			expr(path, v.Y)
		case *ast.ParenExpr:
			expr(path, v.X)
		}
	}
	expr("", lit)
	return s
}

// joinKey appends an object key to a spec path.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Locate finds where the user wrote path: exact is true when the path
// itself is written; otherwise the position is that of its nearest written
// ancestor (ok false when only the document itself is, or s is nil).
func (s *Source) Locate(path string) (line, col int, exact, ok bool) {
	if s == nil {
		return 0, 0, false, false
	}
	if p, found := s.pos[path]; found {
		return p.line, p.col, true, true
	}
	for path != "" {
		path = ParentPath(path)
		if path == "" {
			break
		}
		if p, found := s.pos[path]; found {
			return p.line, p.col, false, true
		}
	}
	return 0, 0, false, false
}

// Place gives every issue that has a spec path but no position the
// position of its path in s: the user's value, or for a field the user
// did not write the nearest written ancestor, marked as a default. With a
// nil s the issues are left as they are.
func (s *Source) Place(is []Issue) {
	if s == nil {
		return
	}
	for i := range is {
		v := &is[i]
		if v.File != "" || v.Default || v.Path == "" {
			continue
		}
		line, col, exact, ok := s.Locate(v.Path)
		v.Default = !exact
		if ok {
			v.File, v.Line, v.Col = s.File, line, col
		}
	}
}

// ParentPath is path without its last selector: a.b[2].c → a.b[2] →
// a.b → a → "".
func ParentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// Within reports whether path is at or inside base (base is path or one
// of its ancestors).
func Within(path, base string) bool {
	if path == base || base == "" {
		return true
	}
	return len(path) > len(base) && strings.HasPrefix(path, base) && (path[len(base)] == '.' || path[len(base)] == '[')
}

// SplitPath cuts a spec path into its selectors: object keys as they are,
// list indices as decimal strings (jobs.kinds[1].name → jobs, kinds, 1,
// name).
func SplitPath(path string) []string {
	var out []string
	for path != "" {
		switch {
		case path[0] == '.':
			path = path[1:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(out, path)
			}
			out = append(out, path[1:end])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			out = append(out, path[:end])
			path = path[end:]
		}
	}
	return out
}

// lineIndex holds the offset of every line start.
type lineIndex []int

func lineStarts(raw []byte) lineIndex {
	idx := lineIndex{0}
	for i, b := range raw {
		if b == '\n' {
			idx = append(idx, i+1)
		}
	}
	return idx
}

// spot turns a byte offset into a line and a column (in bytes, 1-based,
// as CUE counts them).
func (l lineIndex) spot(off int) spot {
	lo, hi := 0, len(l)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if l[m] <= off {
			lo = m
		} else {
			hi = m
		}
	}
	return spot{lo + 1, off - l[lo] + 1}
}

// skipSpace steps over what the JSON decoder leaves before a value:
// white space and the ':' or ',' separating it from the previous token.
func skipSpace(raw []byte, off int) int {
	for off < len(raw) {
		switch raw[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
		default:
			return off
		}
	}
	return off
}
