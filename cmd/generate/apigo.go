package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cellgate/cellgate/internal/config"
)

// renderAPIGo writes gen/api/schemas.go: a Go type per definition, its
// validation from the CUE constraints, the decoders of request bodies and
// query parameters, and the wrapper of each typed route. Written as Go
// rather than a template: which check a constraint becomes is logic.
func renderAPIGo(cfg config.Config, api *API) ([]byte, error) {
	g := &goWriter{api: api, wire: map[string]bool{}, patterns: map[string]string{}}
	for _, r := range cfg.Routes {
		if r.Request != "" {
			g.markWire(api.Lookup(r.Request))
		}
	}
	var body bytes.Buffer
	g.b = &body
	for _, s := range api.Schemas {
		g.typeDecl(s)
	}
	for _, r := range cfg.Routes {
		if r.Params != "" {
			g.pathDecoder(api.Lookup(r.Params))
		}
		if r.Query != "" {
			g.queryDecoder(api.Lookup(r.Query))
		}
	}
	for _, r := range cfg.Routes {
		if r.Request != "" && !g.bodyDone[r.Request] {
			g.bodyDecoder(api.Lookup(r.Request))
		}
	}
	for _, r := range cfg.Routes {
		if r.Typed() {
			g.serve(r)
		}
	}
	var out bytes.Buffer
	out.WriteString(Header + "\n\n")
	out.WriteString("package api\n\n")
	if g.needBody {
		body.WriteString(bodyHelpers)
	}
	body.WriteString(joinHelper)
	used, err := usedPackages(body.Bytes())
	if err != nil {
		return nil, err
	}
	var imports []string
	for _, im := range []string{"bytes", "encoding/json", "errors", "io", "mime", "net/http", "net/url", "reflect", "regexp",
		"strconv", "strings", "time", "unicode/utf8", "github.com/labstack/echo/v4",
		"github.com/cellgate/cellgate/internal/httpguard", "github.com/cellgate/cellgate/internal/shards"} {
		base := im[strings.LastIndex(im, "/")+1:]
		if base == "v4" {
			base = "echo"
		}
		if used[base] || (base == "regexp" && len(g.patterns) > 0) {
			imports = append(imports, strconv.Quote(im))
		}
	}
	var std, other []string
	for _, im := range imports {
		if strings.Contains(im, ".") {
			other = append(other, im)
		} else {
			std = append(std, im)
		}
	}
	out.WriteString("import (\n" + strings.Join(std, "\n") + "\n\n" + strings.Join(other, "\n") + "\n)\n\n")
	if len(g.patterns) > 0 {
		names := make([]string, 0, len(g.patterns))
		for n := range g.patterns {
			names = append(names, n)
		}
		sort.Strings(names)
		out.WriteString("// The patterns of the schemas' strings, compiled once.\nvar (\n")
		for _, n := range names {
			fmt.Fprintf(&out, "\t%s = regexp.MustCompile(%s)\n", n, strconv.Quote(g.patterns[n]))
		}
		out.WriteString(")\n\n")
	}
	out.Write(body.Bytes())
	b, err := format.Source(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("gofmt api/schemas.go: %w\n%s", err, out.Bytes())
	}
	return b, nil
}

// usedPackages lists the package names src (declarations without a
// package clause) selects from.
func usedPackages(src []byte) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "schemas.go", append([]byte("package api\n"), src...), 0)
	if err != nil {
		return nil, fmt.Errorf("api/schemas.go: %w\n%s", err, src)
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if se, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := se.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used, nil
}

type goWriter struct {
	b        *bytes.Buffer
	api      *API
	wire     map[string]bool   // definitions decoded from a body: they get a wire type
	patterns map[string]string // regexp variable → pattern
	bodyDone map[string]bool
	needBody bool
}

func (g *goWriter) p(format string, args ...any) { fmt.Fprintf(g.b, format, args...) }

// markWire marks s and every definition it holds as decoded from a body.
func (g *goWriter) markWire(s *Schema) {
	if s == nil || g.wire[s.Name] {
		return
	}
	g.wire[s.Name] = true
	for _, r := range refs(s) {
		if r != s.Name {
			g.markWire(g.api.Lookup(r))
		}
	}
	// A named list's items.
	if s.Items != nil {
		for _, r := range refs(s.Items) {
			g.markWire(g.api.Lookup(r))
		}
	}
}

// goType is the Go type of a (property) schema.
func (g *goWriter) goType(s *Schema) string {
	switch {
	case s.Ref != "":
		return s.Ref
	case s.Type == "array":
		return "[]" + g.goType(s.Items)
	case s.Type == "string" && s.Format == "date-time":
		return "time.Time"
	case s.Type == "string":
		return "string"
	case s.Type == "integer":
		return "int64"
	case s.Type == "number":
		return "float64"
	case s.Type == "boolean":
		return "bool"
	}
	// readSchema refused the rest; an inline struct is refused here.
	return "struct{}"
}

// wireType is the Go type a body decodes s into: definitions as their
// wire types, so a missing required field is seen as a nil pointer.
func (g *goWriter) wireType(s *Schema) string {
	switch {
	case s.Ref != "" && g.api.Lookup(s.Ref).Type == "object":
		return lowerFirst(s.Ref) + "Wire"
	case s.Ref != "":
		return g.wireType(g.api.Lookup(s.Ref))
	case s.Type == "array":
		return "[]" + g.wireType(s.Items)
	}
	return g.goType(s)
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// comment turns text into // lines, each after prefix and ending in a
// newline; "" for no text.
func comment(prefix, text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		b.WriteString(strings.TrimRight(prefix+"// "+strings.TrimSpace(l), " ") + "\n")
	}
	return b.String()
}

// typeDecl writes a definition's Go type, its Validate method and, when it
// is decoded from a body, its wire type.
func (g *goWriter) typeDecl(s *Schema) {
	if d := s.Description; strings.HasPrefix(d, "#"+s.Name+" ") {
		g.p("%s", comment("", d[1:]))
	} else {
		g.p("// %s is #%s of the spec.\n", s.Name, s.Name)
		if d != "" {
			g.p("//\n%s", comment("", d))
		}
	}
	recv := "v " + s.Name
	if s.Type == "object" {
		recv = "v *" + s.Name
		g.p("type %s struct {\n", s.Name)
		for _, pr := range s.Props {
			g.p("%s", comment("\t", pr.Schema.Description))
			t, tag := g.goType(pr.Schema), pr.Name
			if pr.Optional() {
				t, tag = "*"+t, tag+",omitempty"
			}
			g.p("\t%s %s `json:%q`\n", goField(pr.Name), t, tag)
		}
		g.p("}\n\n")
	} else {
		g.p("type %s %s\n\n", s.Name, g.goType(&Schema{Type: s.Type, Format: s.Format, Items: s.Items}))
	}
	g.p("// Validate checks v against #%s's constraints: every failing field, or nil.\n", s.Name)
	g.p("func (%s) Validate() []httpguard.FieldError {\n\tvar errs []httpguard.FieldError\n\tv.validate(\"\", \"body\", &errs)\n\treturn errs\n}\n\n", recv)
	g.p("// validate adds v's failures to errs; path is v's own path (\"\" at the top).\n")
	g.p("func (%s) validate(path, in string, errs *[]httpguard.FieldError) {\n", recv)
	if s.Type == "object" {
		for _, pr := range s.Props {
			x := "v." + goField(pr.Name)
			path := fmt.Sprintf("join(path, %q)", pr.Name)
			if pr.Optional() {
				if c := g.checks(pr.Schema, "(*"+x+")", path, false); c != "" {
					g.p("\tif %s != nil {\n%s\t}\n", x, c)
				}
			} else {
				g.p("%s", g.checks(pr.Schema, x, path, false))
			}
		}
	} else {
		g.p("%s", g.checks(&Schema{Type: s.Type, Format: s.Format, Items: s.Items, MinLength: s.MinLength, MaxLength: s.MaxLength,
			Pattern: s.Pattern, Enum: s.Enum, Minimum: s.Minimum, Maximum: s.Maximum, ExclMin: s.ExclMin, ExclMax: s.ExclMax,
			MinItems: s.MinItems, MaxItems: s.MaxItems}, "v", "path", false))
	}
	g.p("}\n\n")
	if !g.wire[s.Name] || s.Type != "object" {
		return
	}
	w := lowerFirst(s.Name) + "Wire"
	g.p("// %s is %s as a body decodes it: a nil field was absent.\n", w, s.Name)
	g.p("type %s struct {\n", w)
	for _, pr := range s.Props {
		g.p("\t%s *%s `json:%q`\n", goField(pr.Name), g.wireType(pr.Schema), pr.Name)
	}
	g.p("}\n\n")
	g.p("// value turns w into a %s, adding every missing required field and\n// failed constraint to errs (paths under p).\n", s.Name)
	g.p("func (w *%s) value(p, in string, errs *[]httpguard.FieldError) (v %s) {\n", w, s.Name)
	for _, pr := range s.Props {
		f := goField(pr.Name)
		path := fmt.Sprintf("join(p, %q)", pr.Name)
		switch {
		case pr.Schema.Default != nil:
			g.p("\tif w.%s == nil {\n", f)
			g.p("\t\tv.%s = %s\n", f, g.literal(pr.Schema, pr.Schema.Default, pr.Optional()))
			g.p("\t} else {\n")
		case pr.Required:
			g.p("\tif w.%s == nil {\n", f)
			g.p("\t\t*errs = append(*errs, httpguard.FieldError{Field: %s, In: in, Reason: \"is required\"})\n", path)
			g.p("\t} else {\n")
		default:
			g.p("\tif w.%s != nil {\n", f)
		}
		conv := g.fromWire(pr.Schema, "x", "(*w."+f+")", path)
		g.p("%s", conv)
		g.p("%s", g.checks(pr.Schema, "x", path, true))
		if pr.Optional() && strings.HasSuffix(conv, ":= (*w."+f+")\n") {
			// The wire value is the Go value: its pointer is reused.
			g.p("\t\tv.%s = w.%s\n", f, f)
		} else if pr.Optional() {
			g.p("\t\tv.%s = &x\n", f)
		} else {
			g.p("\t\tv.%s = x\n", f)
		}
		g.p("\t}\n")
	}
	g.p("\treturn v\n}\n\n")
}

// fromWire declares x, the Go value of wire value wx.
func (g *goWriter) fromWire(s *Schema, x, wx, path string) string {
	switch {
	case s.Ref != "" && g.api.Lookup(s.Ref).Type == "object":
		return fmt.Sprintf("\t\t%s := %s.value(%s, in, errs)\n", x, wx, path)
	case s.Type == "array" && s.Items.Ref != "" && g.api.Lookup(s.Items.Ref).Type == "object":
		return fmt.Sprintf("\t\t%s := make(%s, len(%s))\n\t\tfor i := range %s {\n\t\t\t%s[i] = %s[i].value(%s+\"[\"+strconv.Itoa(i)+\"]\", in, errs)\n\t\t}\n",
			x, g.goType(s), wx, wx, x, wx, path)
	}
	return fmt.Sprintf("\t\t%s := %s\n", x, wx)
}

// checks returns the statements checking value x (path: the Go
// expression of its path) against s's constraints. inValue: x was built
// by a wire value, which validated its structs already.
func (g *goWriter) checks(s *Schema, x, path string, inValue bool) string {
	var b strings.Builder
	fail := func(cond, reason string) {
		fmt.Fprintf(&b, "\tif %s {\n\t\t*errs = append(*errs, httpguard.FieldError{Field: %s, In: in, Reason: %s})\n\t}\n", cond, path, strconv.Quote(reason))
	}
	if s.Ref != "" {
		if t := g.api.Lookup(s.Ref); t.Type != "object" || !inValue {
			fmt.Fprintf(&b, "\t%s.validate(%s, in, errs)\n", x, path)
		}
		return b.String()
	}
	switch s.Type {
	case "string":
		if s.Format == "date-time" {
			break
		}
		if s.MinLength != nil && *s.MinLength > 0 {
			if *s.MinLength == 1 {
				fail(x+` == ""`, "must not be empty")
			} else {
				// A rune is at most 4 bytes (utf8.UTFMax): count only a
				// string short enough to have too few.
				fail(fmt.Sprintf("len(%s) < %d && utf8.RuneCountInString(%s) < %d", x, *s.MinLength*utf8.UTFMax, x, *s.MinLength), fmt.Sprintf("must be at least %d characters", *s.MinLength))
			}
		}
		if s.MaxLength != nil {
			// Bytes bound runes from above: count only a long string.
			fail(fmt.Sprintf("len(%s) > %d && utf8.RuneCountInString(%s) > %d", x, *s.MaxLength, x, *s.MaxLength), fmt.Sprintf("must be at most %d characters", *s.MaxLength))
		}
		if s.Pattern != "" {
			re := g.pattern(s.Pattern)
			fail(fmt.Sprintf("!%s.MatchString(%s)", re, x), "must match "+s.Pattern)
		}
	case "integer", "number":
		if s.Minimum != "" {
			op, word := "<", "at least"
			if s.ExclMin {
				op, word = "<=", "greater than"
			}
			fail(fmt.Sprintf("%s %s %s", x, op, s.Minimum), fmt.Sprintf("must be %s %s", word, s.Minimum))
		}
		if s.Maximum != "" {
			op, word := ">", "at most"
			if s.ExclMax {
				op, word = ">=", "less than"
			}
			fail(fmt.Sprintf("%s %s %s", x, op, s.Maximum), fmt.Sprintf("must be %s %s", word, s.Maximum))
		}
	case "array":
		if s.MinItems != nil && *s.MinItems > 0 {
			fail(fmt.Sprintf("len(%s) < %d", x, *s.MinItems), fmt.Sprintf("must have at least %d elements", *s.MinItems))
		}
		if s.MaxItems != nil {
			fail(fmt.Sprintf("len(%s) > %d", x, *s.MaxItems), fmt.Sprintf("must have at most %d elements", *s.MaxItems))
		}
		if inner := g.checks(s.Items, x+"[i]", path+`+"["+strconv.Itoa(i)+"]"`, inValue); inner != "" {
			fmt.Fprintf(&b, "\tfor i := range %s {\n%s\t}\n", x, inner)
		}
	}
	if len(s.Enum) > 0 {
		lits := make([]string, len(s.Enum))
		words := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			lits[i] = g.literal(s, e, false)
			words[i] = string(e)
		}
		fmt.Fprintf(&b, "\tswitch %s {\n\tcase %s:\n\tdefault:\n\t\t*errs = append(*errs, httpguard.FieldError{Field: %s, In: in, Reason: %s})\n\t}\n",
			x, strings.Join(lits, ", "), path, strconv.Quote("must be one of "+strings.Join(words, ", ")))
	}
	return b.String()
}

// pattern returns the variable holding the compiled pattern.
func (g *goWriter) pattern(re string) string {
	for name, p := range g.patterns {
		if p == re {
			return name
		}
	}
	name := fmt.Sprintf("pattern%d", len(g.patterns))
	g.patterns[name] = re
	return name
}

// literal renders a JSON value as a Go value of s's type.
func (g *goWriter) literal(s *Schema, raw json.RawMessage, ptr bool) string {
	var lit string
	switch s.Type {
	case "string":
		var str string
		_ = json.Unmarshal(raw, &str)
		lit = strconv.Quote(str)
	case "integer", "number":
		lit = g.goType(s) + "(" + string(raw) + ")"
	default:
		lit = string(raw)
	}
	if ptr {
		return "func() *" + g.goType(s) + " { x := " + lit + "; return &x }()"
	}
	return lit
}

// queryDecoder writes Decode<Q>, which reads a route's query parameters.
func (g *goWriter) queryDecoder(s *Schema) {
	if g.bodyDone == nil {
		g.bodyDone = map[string]bool{}
	}
	if g.bodyDone["query:"+s.Name] {
		return
	}
	g.bodyDone["query:"+s.Name] = true
	g.p("// Decode%s reads #%s from query parameters: every unknown, repeated,\n", s.Name, s.Name)
	g.p("// missing, malformed or failing parameter is in the *httpguard.Problem\n// (400 invalid_request) it returns.\n")
	g.p("func Decode%s(q url.Values) (%s, error) {\n\tvar v %s\n\tvar errs []httpguard.FieldError\n", s.Name, s.Name, s.Name)
	names := make([]string, len(s.Props))
	for i, pr := range s.Props {
		names[i] = strconv.Quote(pr.Name)
	}
	g.p("\tfor k, vs := range q {\n\t\tswitch k {\n\t\tcase %s:\n\t\t\tif len(vs) > 1 {\n", strings.Join(names, ", "))
	g.p("\t\t\t\terrs = append(errs, httpguard.FieldError{Field: k, In: \"query\", Reason: \"must be given once\"})\n\t\t\t}\n")
	g.p("\t\tdefault:\n\t\t\terrs = append(errs, httpguard.FieldError{Field: k, In: \"query\", Reason: \"is not a parameter of this route\"})\n\t\t}\n\t}\n")
	g.p("\tin := \"query\"\n")
	for _, pr := range s.Props {
		g.scalarParam(pr, fmt.Sprintf("vs := q[%q]; len(vs) == 0", pr.Name), "vs[0]")
	}
	g.p("\tif errs != nil {\n\t\treturn v, httpguard.InvalidRequest(errs)\n\t}\n\treturn v, nil\n}\n\n")
}

// scalarParam writes the statements reading parameter pr into v.<field>:
// absent (when absent is a Go condition; "" when it cannot be) takes the
// default or is "is required", raw is the Go expression of its text,
// parsed to the field's type and checked against its constraints.
func (g *goWriter) scalarParam(pr *Prop, absent, raw string) {
	f := goField(pr.Name)
	path := strconv.Quote(pr.Name)
	if absent != "" {
		g.p("\tif %s {\n", absent)
		switch {
		case pr.Schema.Default != nil:
			g.p("\t\tv.%s = %s\n", f, g.literal(pr.Schema, pr.Schema.Default, pr.Optional()))
		case pr.Required:
			g.p("\t\terrs = append(errs, httpguard.FieldError{Field: %s, In: in, Reason: \"is required\"})\n", path)
		}
		g.p("\t} else ")
	} else {
		g.p("\t")
	}
	var parse, word string
	switch pr.Schema.Type {
	case "string":
		parse = "x, err := " + raw + ", error(nil)"
	case "integer":
		parse, word = "x, err := strconv.ParseInt("+raw+", 10, 64)", "an integer"
	case "number":
		parse, word = "x, err := strconv.ParseFloat("+raw+", 64)", "a number"
	case "boolean":
		parse, word = "x, err := strconv.ParseBool("+raw+")", "true or false"
	}
	g.p("if %s; err != nil {\n", parse)
	g.p("\t\terrs = append(errs, httpguard.FieldError{Field: %s, In: in, Reason: %q})\n", path, "must be "+word)
	g.p("\t} else {\n")
	g.p("%s", strings.ReplaceAll(g.checks(pr.Schema, "x", path, false), "*errs = append(*errs", "errs = append(errs"))
	if pr.Optional() {
		g.p("\t\tv.%s = &x\n", f)
	} else {
		g.p("\t\tv.%s = x\n", f)
	}
	g.p("\t}\n")
}

// pathDecoder writes Decode<P>Path, which reads a route's path
// parameters (checkParams made them the path's {names}, all required).
func (g *goWriter) pathDecoder(s *Schema) {
	if g.bodyDone == nil {
		g.bodyDone = map[string]bool{}
	}
	if g.bodyDone["path:"+s.Name] {
		return
	}
	g.bodyDone["path:"+s.Name] = true
	g.p("// Decode%sPath reads #%s from the route's path parameters: every\n", s.Name, s.Name)
	g.p("// malformed or failing parameter is in the *httpguard.Problem (400\n// invalid_request) it returns.\n")
	g.p("func Decode%sPath(c echo.Context) (%s, error) {\n\tvar v %s\n\tvar errs []httpguard.FieldError\n", s.Name, s.Name, s.Name)
	g.p("\tin := \"path\"\n")
	for _, pr := range s.Props {
		g.scalarParam(pr, "", fmt.Sprintf("c.Param(%q)", pr.Name))
	}
	g.p("\tif errs != nil {\n\t\treturn v, httpguard.InvalidRequest(errs)\n\t}\n\treturn v, nil\n}\n\n")
}

// bodyDecoder writes Decode<B>, which reads a request body.
func (g *goWriter) bodyDecoder(s *Schema) {
	if g.bodyDone == nil {
		g.bodyDone = map[string]bool{}
	}
	g.bodyDone[s.Name] = true
	g.needBody = true
	w := lowerFirst(s.Name) + "Wire"
	g.p("// Decode%s reads #%s from r's JSON body. A body that is not JSON, or\n", s.Name, s.Name)
	g.p("// has unknown fields, values of the wrong type, missing required fields\n")
	g.p("// or failed constraints is refused with an *httpguard.Problem (415\n")
	g.p("// unsupported_media_type, 400 invalid_json or invalid_request naming every\n")
	g.p("// field); a failed read (too large, too slow) is returned as it is.\n")
	g.p("func Decode%s(r *http.Request) (%s, error) {\n\tvar w %s\n", s.Name, s.Name, w)
	g.p("\terrs, err := decodeBody(r, &w)\n\tif err != nil {\n\t\treturn %s{}, err\n\t}\n", s.Name)
	g.p("\tv := w.value(\"\", \"body\", &errs)\n")
	g.p("\tif errs != nil {\n\t\treturn v, httpguard.InvalidRequest(dedupe(errs))\n\t}\n\treturn v, nil\n}\n\n")
}

// serve writes the wrapper of a typed route: decode, call, answer.
func (g *goWriter) serve(r config.Route) {
	sig := "echo.HandlerFunc"
	if !r.Public {
		sig = "func(c echo.Context, sh shards.Accessor) error"
	}
	g.p("// serve%s decodes and validates %s %s's input, then calls h.%s.\n", r.Handler, r.Method, r.Path, r.Handler)
	g.p("func serve%s(h Handler) %s {\n", r.Handler, sig)
	if r.Public {
		g.p("\treturn func(c echo.Context) error {\n")
	} else {
		g.p("\treturn func(c echo.Context, sh shards.Accessor) error {\n")
	}
	args := []string{"c"}
	if !r.Public {
		args = append(args, "Request{Tenant: sh.Tenant(), Shard: sh}")
	}
	if r.Params != "" {
		g.p("\t\tparams, err := Decode%sPath(c)\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n", r.Params)
		args = append(args, "params")
	}
	if r.Query != "" {
		g.p("\t\tquery, err := Decode%s(c.QueryParams())\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n", r.Query)
		args = append(args, "query")
	}
	if r.Request != "" {
		g.p("\t\tbody, err := Decode%s(c.Request())\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n", r.Request)
		args = append(args, "body")
	}
	status, out := successResponse(r)
	if out == "" {
		g.p("\t\treturn h.%s(%s)\n\t}\n}\n\n", r.Handler, strings.Join(args, ", "))
		return
	}
	g.p("\t\tout, err := h.%s(%s)\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n", r.Handler, strings.Join(args, ", "))
	if g.api.Lookup(out).Type == "array" {
		g.p("\t\tif out == nil {\n\t\t\tout = %s{} // [], never null\n\t\t}\n", out)
	}
	g.p("\t\treturn c.JSON(%s, out)\n\t}\n}\n\n", status)
}

// successResponse is a route's 2xx status and its definition, if any.
func successResponse(r config.Route) (status, name string) {
	for st, n := range r.Responses {
		if st[0] == '2' {
			return st, n
		}
	}
	return "", ""
}

// handlerSignature is a route's Handler method signature after its name.
func handlerSignature(r config.Route) string {
	params := []string{"c echo.Context"}
	if !r.Public {
		params = append(params, "r Request")
	}
	if r.Params != "" {
		params = append(params, "params "+r.Params)
	}
	if r.Query != "" {
		params = append(params, "query "+r.Query)
	}
	if r.Request != "" {
		params = append(params, "body "+r.Request)
	}
	res := "error"
	if _, out := successResponse(r); out != "" {
		res = "(" + out + ", error)"
	}
	return "(" + strings.Join(params, ", ") + ") " + res
}

// bodyHelpers are the shared helpers of the body decoders.
const bodyHelpers = `// errUnsupportedMediaType refuses a body that is not JSON.
var errUnsupportedMediaType = httpguard.NewProblem(http.StatusUnsupportedMediaType, "unsupported_media_type",
	"body must be application/json (UTF-8)")

// errInvalidJSON refuses a body that is not one JSON value.
var errInvalidJSON = httpguard.NewProblem(http.StatusBadRequest, "invalid_json", "body is not valid JSON")

// errTrailingData refuses data after the JSON value.
var errTrailingData = httpguard.NewProblem(http.StatusBadRequest, "trailing_data", "body has data after the JSON value")

// decodeBody decodes r's JSON body into w (no body leaves w empty). A
// value of the wrong type is returned as a field error with decoding
// carried on; an unknown field, bad JSON or media type as a problem; a
// failed read as it is, for the runtime to answer (413, 408).
func decodeBody(r *http.Request, w any) ([]httpguard.FieldError, error) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if !jsonMediaType(r.Header.Get("Content-Type")) {
		return nil, errUnsupportedMediaType
	}
	// The body is read whole first, so that a failed read (a body over the
	// limit, too slow, or a chunked body cut short) goes to the runtime as
	// the read error it is, never as JSON that does not parse.
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var errs []httpguard.FieldError
	if err := dec.Decode(w); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return nil, nil // an empty chunked body
		case errors.As(err, &te):
			errs = append(errs, httpguard.FieldError{Field: te.Field, In: "body", Reason: "must be " + jsonKind(te.Type)})
		case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errInvalidJSON
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
			return nil, httpguard.InvalidRequest([]httpguard.FieldError{{Field: name, In: "body", Reason: "is not a field of this request"}})
		default:
			var pe *time.ParseError
			if errors.As(err, &pe) {
				return nil, httpguard.InvalidRequest([]httpguard.FieldError{{Field: "", In: "body", Reason: "a time must be RFC 3339: " + pe.Error()}})
			}
			return nil, err
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errTrailingData
	}
	return errs, nil
}

// smallBody is the largest declared length read into a buffer of exactly
// that size; a longer or chunked body grows its buffer as it is read, so
// a false Content-Length never allocates more than this up front.
const smallBody = 64 << 10

// readBody reads r's body whole: into a buffer of its declared length
// when that is small (the usual JSON request: no buffer growth), else as
// io.ReadAll does. A read error (too large, too slow, cut short) is
// returned as it is.
func readBody(r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= smallBody {
		data := make([]byte, n)
		if _, err := io.ReadFull(r.Body, data); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // shorter than its Content-Length
			}
			return nil, err
		}
		return data, nil
	}
	return io.ReadAll(r.Body)
}

// jsonMediaType reports whether ct is application/json or
// application/*+json, in UTF-8 when a charset is named.
func jsonMediaType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	ok := err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")))
	if cs, has := params["charset"]; ok && has && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return ok
}

// jsonKind names the JSON a Go type takes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// dedupe drops the later errors of the first one's field: a value of the
// wrong type (decodeBody's error, first) is also seen as missing.
func dedupe(errs []httpguard.FieldError) []httpguard.FieldError {
	out := errs[:1]
	for _, e := range errs[1:] {
		if e.Field != errs[0].Field {
			out = append(out, e)
		}
	}
	return out
}
`

// joinHelper joins a path and a field name; emitted with the types.
const joinHelper = `// join is path.name, or name at the top; it runs only for a failing
// field or a nested struct.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
`

// renderAPITest writes gen/api/schemas_test.go: per request type a table
// of invalid inputs derived from its schema (each required field missing,
// an unknown field, each field of the wrong type, each constraint broken)
// that must be refused with 400 naming the field before the handler runs,
// and a fuzz test of its decoder with the table as seeds.
func renderAPITest(cfg config.Config, api *API) ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s\n\npackage api\n\n", Header)
	urlImport := ""
	for _, r := range cfg.Routes {
		if r.Params != "" {
			urlImport = "\t\"net/url\"\n"
		}
	}
	p("import (\n\t\"errors\"\n\t\"net/http\"\n\t\"net/http/httptest\"\n%s\t\"strings\"\n\t\"testing\"\n\n", urlImport)
	p("\t\"github.com/labstack/echo/v4\"\n\n\t\"github.com/cellgate/cellgate/internal/httpguard\"\n\t\"github.com/cellgate/cellgate/internal/shards\"\n)\n\n")
	p("// stub implements Handler and records a call: invalid input must never make one.\n")
	p("type stub struct{ called *bool }\n\n")
	for _, r := range cfg.Routes {
		_, out := successResponse(r)
		ret := "nil"
		if out != "" {
			if api.Lookup(out).Type == "object" {
				ret = out + "{}, nil"
			} else {
				ret = "nil, nil"
			}
		}
		p("func (s stub) %s%s {\n\t*s.called = true\n\treturn %s\n}\n\n", r.Handler, handlerSignature(r), ret)
	}
	p(`// invalidCase is one input the route must refuse, naming field.
type invalidCase struct{ input, field string }

// expectRefused runs serve on each case: 400 invalid_request (or
// invalid_json) naming the field, the handler never called.
// The input is a body (in "body"), a query string (in "query") or the
// path parameters as a query string (in "path", over those of target).
func expectRefused(t *testing.T, method, target string, cases []invalidCase, in string,
	serve func(h Handler, c echo.Context) error) {
	t.Helper()
	e := echo.New()
	for _, tc := range cases {
		var req *http.Request
		switch in {
		case "body":
			req = httptest.NewRequest(method, target, strings.NewReader(tc.input))
			req.Header.Set("Content-Type", "application/json")
		case "query":
			req = httptest.NewRequest(method, target+"?"+tc.input, nil)
		default:
			req = httptest.NewRequest(method, target, nil)
		}
		c := e.NewContext(req, httptest.NewRecorder())
		if in == "path" {
			setParams(t, c, tc.input)
		}
		called := false
		err := serve(stub{&called}, c)
		var p *httpguard.Problem
		if !errors.As(err, &p) || p.Status != http.StatusBadRequest {
			t.Errorf("%%s: error %%v, want a 400 problem", tc.input, err)
			continue
		}
		if called {
			t.Errorf("%%s: the handler ran", tc.input)
		}
		named := false
		for _, fe := range p.Errors {
			named = named || fe.Field == tc.field || strings.HasPrefix(fe.Field, tc.field+".") || strings.HasPrefix(fe.Field, tc.field+"[")
		}
		if !named {
			t.Errorf("%%s: the 400 does not name %%s: %%s", tc.input, tc.field, p.Body())
		}
	}
}

`)
	for _, r := range cfg.Routes {
		if r.Params == "" {
			continue
		}
		// Only a route with path parameters needs it.
		p(`// setParams gives c the path parameters of the query string q.
func setParams(t *testing.T, c echo.Context, q string) {
	t.Helper()
	vs, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	var names, values []string
	for k, v := range vs {
		names, values = append(names, k), append(values, v[0])
	}
	c.SetParamNames(names...)
	c.SetParamValues(values...)
}

`)
		break
	}
	for _, r := range cfg.Routes {
		if r.Request == "" && r.Query == "" && r.Params == "" {
			continue
		}
		call := "serve" + r.Handler + "(h)(c, shards.Accessor{})"
		if r.Public {
			call = "serve" + r.Handler + "(h)(c)"
		}
		serve := "func(h Handler, c echo.Context) error { return " + call + " }"
		// A route's invalid path and query parameters each get a test that
		// they are refused before the handler.
		for _, part := range []struct {
			name, test, in string
			cases          func(*Schema) ([]testCase, error)
		}{
			{r.Params, "Path", "path", pathCases},
			{r.Query, "Query", "query", queryCases},
		} {
			if part.name == "" {
				continue
			}
			cases, err := part.cases(api.Lookup(part.name))
			if err != nil {
				return nil, err
			}
			p("// TestInvalid%s%sNeverReachesHandler: %s %s's invalid %s parameters.\n", r.Handler, part.test, r.Method, r.Path, part.in)
			p("func TestInvalid%s%sNeverReachesHandler(t *testing.T) {\n", r.Handler, part.test)
			p("\texpectRefused(t, %q, %q, []invalidCase{\n", r.Method, examplePath(r.Path))
			for _, c := range cases {
				p("\t\t{%s, %q},\n", strconv.Quote(c.input), c.field)
			}
			p("\t}, %q, %s)\n}\n\n", part.in, serve)
		}
		if r.Request != "" {
			cases, err := bodyCases(api, api.Lookup(r.Request), "")
			if err != nil {
				return nil, err
			}
			p("// TestInvalid%sBodyNeverReachesHandler: %s %s's invalid bodies.\n", r.Handler, r.Method, r.Path)
			p("func TestInvalid%sBodyNeverReachesHandler(t *testing.T) {\n", r.Handler)
			p("\texpectRefused(t, %q, %q, %sCases, \"body\", %s)\n}\n\n", r.Method, examplePath(r.Path), lowerFirst(r.Handler), serve)
			p("var %sCases = []invalidCase{\n", lowerFirst(r.Handler))
			for _, c := range cases {
				p("\t{%s, %q},\n", strconv.Quote(c.input), c.field)
			}
			p("}\n\n")
			p(`// FuzzDecode%[1]s: whatever the body, Decode%[2]s either returns a value
// that validates or a 4xx problem whose every field error names its field.
func FuzzDecode%[1]s(f *testing.F) {
	f.Add("{}")
	for _, c := range %[3]sCases {
		f.Add(c.input)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(%[4]q, %[5]q, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		v, err := Decode%[2]s(req)
		if err == nil {
			if errs := v.Validate(); errs != nil {
				t.Fatalf("decoded %%q into a value that fails validation: %%v", body, errs)
			}
			return
		}
		var p *httpguard.Problem
		if !errors.As(err, &p) || p.Status < 400 || p.Status > 499 {
			t.Fatalf("%%q: error %%v, want a 4xx problem", body, err)
		}
		for _, fe := range p.Errors {
			if fe.Field == "" && !strings.HasPrefix(fe.Reason, "a time") {
				t.Fatalf("%%q: an error names no field: %%s", body, p.Body())
			}
		}
	})
}

`, r.Handler, r.Request, lowerFirst(r.Handler), r.Method, examplePath(r.Path))
		}
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("gofmt api/schemas_test.go: %w\n%s", err, b.Bytes())
	}
	return src, nil
}

// examplePath fills a path's parameters with 1.
func examplePath(p string) string {
	for _, name := range pathParams(p) {
		p = strings.Replace(p, "{"+name+"}", "1", 1)
	}
	return p
}

type testCase struct{ input, field string }

// bodyCases are the invalid bodies of object s, its fields under prefix.
func bodyCases(api *API, s *Schema, prefix string) ([]testCase, error) {
	wrap := func(v string) string {
		// Nest the case under the enclosing fields.
		parts := strings.Split(strings.TrimSuffix(prefix, "."), ".")
		if prefix == "" {
			return v
		}
		for i := len(parts) - 1; i >= 0; i-- {
			k, _ := json.Marshal(parts[i])
			v = "{" + string(k) + ":" + v + "}"
		}
		return v
	}
	var out []testCase
	for _, pr := range s.Props {
		if pr.Required && pr.Schema.Default == nil {
			out = append(out, testCase{wrap("{}"), prefix + pr.Name})
		}
	}
	out = append(out, testCase{wrap(`{"zz_unknown":1}`), prefix + "zz_unknown"})
	for _, pr := range s.Props {
		field := func(v string) string {
			k, _ := json.Marshal(pr.Name)
			return wrap("{" + string(k) + ":" + v + "}")
		}
		ps := pr.Schema
		if ps.Ref != "" {
			t := api.Lookup(ps.Ref)
			if t.Type == "object" {
				out = append(out, testCase{field(`"x"`), prefix + pr.Name})
				inner, err := bodyCases(api, t, prefix+pr.Name+".")
				if err != nil {
					return nil, err
				}
				out = append(out, inner...)
				continue
			}
			ps = t
		}
		for _, v := range invalidValues(ps) {
			out = append(out, testCase{field(v), prefix + pr.Name})
		}
	}
	return out, nil
}

// invalidValues are JSON values s refuses: the wrong type, then one per
// constraint.
func invalidValues(s *Schema) []string {
	var out []string
	switch s.Type {
	case "string":
		out = append(out, "12345")
		if s.MinLength != nil && *s.MinLength > 0 {
			out = append(out, strconv.Quote(strings.Repeat("a", int(*s.MinLength)-1)))
		}
		if s.MaxLength != nil {
			out = append(out, strconv.Quote(strings.Repeat("a", int(*s.MaxLength)+1)))
		}
		if s.Pattern != "" {
			if re, err := regexp.Compile(s.Pattern); err == nil {
				for _, c := range []string{"", " ", "a", "@", "0", "aaaa"} {
					if !re.MatchString(c) {
						b, _ := json.Marshal(c)
						out = append(out, string(b))
						break
					}
				}
			}
		}
		if len(s.Enum) > 0 {
			out = append(out, `"zz_not_a_member"`)
		}
	case "integer", "number":
		out = append(out, `"x"`)
		if s.Type == "integer" {
			out = append(out, "1e30", "1.5")
		}
		if f, err := s.Minimum.Float64(); err == nil {
			out = append(out, strconv.FormatFloat(f-1, 'f', -1, 64))
		}
		if f, err := s.Maximum.Float64(); err == nil {
			out = append(out, strconv.FormatFloat(f+1, 'f', -1, 64))
		}
	case "boolean":
		out = append(out, `"x"`)
	case "array":
		out = append(out, `"x"`)
		if s.MinItems != nil && *s.MinItems > 0 {
			out = append(out, "[]")
		}
	}
	return out
}

// pathCases are the invalid path parameters of params schema s, each as
// a query string of the one parameter it breaks (the others are absent:
// the case checks that its own is named): each of the wrong type, each
// constraint broken.
func pathCases(s *Schema) ([]testCase, error) {
	var out []testCase
	for _, pr := range s.Props {
		for _, v := range invalidValues(pr.Schema) {
			var raw any
			if err := json.Unmarshal([]byte(v), &raw); err != nil {
				return nil, err
			}
			str, ok := raw.(string)
			if !ok {
				if pr.Schema.Type == "string" {
					continue // a path parameter is always a string
				}
				str = v
			}
			out = append(out, testCase{url.Values{pr.Name: {str}}.Encode(), pr.Name})
		}
	}
	return out, nil
}

// queryCases are the invalid query strings of query schema s.
func queryCases(s *Schema) ([]testCase, error) {
	var out []testCase
	for _, pr := range s.Props {
		if pr.Required && pr.Schema.Default == nil {
			out = append(out, testCase{"", pr.Name})
		}
	}
	out = append(out, testCase{"zz_unknown=1", "zz_unknown"})
	for _, pr := range s.Props {
		out = append(out, testCase{pr.Name + "=1&" + pr.Name + "=2", pr.Name})
		for _, v := range invalidValues(pr.Schema) {
			var raw any
			if err := json.Unmarshal([]byte(v), &raw); err != nil {
				return nil, err
			}
			str, ok := raw.(string)
			if !ok {
				if pr.Schema.Type == "string" {
					continue // a query parameter is always a string
				}
				str = v
			}
			q := url.Values{pr.Name: {str}}
			out = append(out, testCase{q.Encode(), pr.Name})
		}
	}
	return out, nil
}
