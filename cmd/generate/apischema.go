package main

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/encoding/openapi"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/schema"
)

// API is the typed surface of the spec: the definitions its routes name,
// read through CUE's OpenAPI encoder into the subset of JSON Schema the
// generator renders as Go types, validation and the OpenAPI document.
type API struct {
	// Schemas are the named definitions, sorted by name (those the routes
	// name and those they reference).
	Schemas []*Schema
	byName  map[string]*Schema
}

// Schema is one JSON Schema in the rendered subset. A named definition or
// a property; Ref points to a named definition instead of describing one.
type Schema struct {
	Name        string // the definition's name, for a named schema
	Ref         string // the definition it refers to, or ""
	Type        string // object, array, string, integer, number, boolean
	Format      string // date-time, int64, ... (date-time is a time.Time)
	Description string
	Props       []*Prop // object properties, in the definition's order
	Items       *Schema // array items
	Enum        []json.RawMessage
	Default     json.RawMessage
	MinLength   *int64
	MaxLength   *int64
	Pattern     string
	Minimum     json.Number
	Maximum     json.Number
	ExclMin     bool
	ExclMax     bool
	MinItems    *int64
	MaxItems    *int64
}

// Prop is an object's property.
type Prop struct {
	Name     string
	Required bool // absent is an error; a default makes it optional on the wire
	Schema   *Schema
}

// Optional reports whether the property may be absent from the input
// with no value: a pointer (nil) in Go.
func (p *Prop) Optional() bool { return !p.Required }

// OnWireOptional reports whether a client may leave the property out.
func (p *Prop) OnWireOptional() bool { return !p.Required || p.Schema.Default != nil }

// Lookup returns the named definition.
func (a *API) Lookup(name string) *Schema { return a.byName[name] }

// loadAPI reads the definitions the routes name from the spec's package
// value. A name without its definition, or a definition outside the
// rendered subset, is an error naming the definition's path.
func loadAPI(root cue.Value, routes []config.Route) (*API, error) {
	api := &API{byName: map[string]*Schema{}}
	var wanted []string
	for i, r := range routes {
		field := fmt.Sprintf("routes[%d]", i)
		if r.Request != "" {
			wanted = append(wanted, r.Request)
			if r.Method == "GET" || r.Method == "DELETE" {
				return nil, fmt.Errorf("%s.request: %s %s cannot have a body (a GET or DELETE body is ignored by caches and proxies); use query", field, r.Method, r.Path)
			}
		}
		if r.Query != "" {
			wanted = append(wanted, r.Query)
		}
		if r.Params != "" {
			wanted = append(wanted, r.Params)
		}
		ok2xx := 0
		for status, name := range r.Responses {
			wanted = append(wanted, name)
			if status[0] == '2' {
				ok2xx++
			}
		}
		if ok2xx > 1 {
			return nil, fmt.Errorf("%s.responses: %d success statuses; a typed handler returns one body, so name one 2xx status (errors are problem details)", field, ok2xx)
		}
	}
	if len(wanted) == 0 {
		return api, nil
	}
	if !root.Exists() {
		return nil, fmt.Errorf("routes name schemas but the spec's package value is not available")
	}
	for _, name := range wanted {
		if v := root.LookupPath(cue.MakePath(cue.Def("#" + name))); !v.Exists() {
			return nil, fmt.Errorf("#%s: no such definition in the spec, but a route names it", name)
		}
	}
	// The encoder takes a value whose top-level fields are all
	// definitions: a new struct holding every definition of the spec (a
	// named one may refer to the others).
	ctx := cuecontext.New() // values of other contexts combine with it
	defs := ctx.CompileString("{}")
	it, err := root.Fields(cue.Definitions(true))
	if err != nil {
		return nil, err
	}
	for it.Next() {
		if sel := it.Selector(); sel.IsDefinition() && !cellgateDefs[sel.String()] {
			defs = defs.FillPath(cue.MakePath(sel), it.Value())
		}
	}
	if err := defs.Err(); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	f, err := openapi.Generate(defs, &openapi.Config{})
	if err != nil {
		return nil, fmt.Errorf("schemas: CUE's OpenAPI encoder: %w", err)
	}
	doc := ctx.BuildFile(f)
	if err := doc.Err(); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	comps := doc.LookupPath(cue.ParsePath("components.schemas"))
	// Only the definitions reachable from the routes are rendered.
	seen := map[string]bool{}
	for len(wanted) > 0 {
		name := wanted[0]
		wanted = wanted[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		v := comps.LookupPath(cue.MakePath(cue.Str(name)))
		if !v.Exists() {
			return nil, fmt.Errorf("#%s: CUE's OpenAPI encoder gave no schema for it", name)
		}
		s, err := readSchema(v, "#"+name)
		if err != nil {
			return nil, err
		}
		s.Name = name
		api.Schemas = append(api.Schemas, s)
		api.byName[name] = s
		wanted = append(wanted, refs(s)...)
	}
	sort.Slice(api.Schemas, func(i, j int) bool { return api.Schemas[i].Name < api.Schemas[j].Name })
	for _, r := range routes {
		if r.Query != "" {
			if err := checkQuery(api.byName[r.Query]); err != nil {
				return nil, err
			}
		}
		if r.Params != "" {
			if err := checkParams(api.byName[r.Params], r.Path); err != nil {
				return nil, err
			}
		}
		if r.Request != "" && api.byName[r.Request].Type != "object" {
			return nil, fmt.Errorf("#%s: a request body must be a struct (it is %s)", r.Request, api.byName[r.Request].Type)
		}
	}
	return api, nil
}

// cellgateDefs are the definitions of schema/cellgate.cue, which a spec's
// package holds beside its own: they are not the API's.
var cellgateDefs = func() map[string]bool {
	out := map[string]bool{}
	v := cuecontext.New().CompileString(schema.Definitions)
	it, err := v.Fields(cue.Definitions(true))
	if err != nil {
		panic("schema.Definitions: " + err.Error())
	}
	for it.Next() {
		out[it.Selector().String()] = true
	}
	return out
}()

// checkParams refuses a path parameters schema that is not a struct of
// scalars or whose fields are not exactly the path's {names}, each
// required: a path parameter is never absent.
func checkParams(s *Schema, path string) error {
	if err := checkScalars(s, "path"); err != nil {
		return err
	}
	names := pathParams(path)
	in := map[string]bool{}
	for _, n := range names {
		in[n] = true
	}
	for _, p := range s.Props {
		if !in[p.Name] {
			return fmt.Errorf("#%s.%s: not a parameter of the path %s (its parameters: %s)", s.Name, p.Name, path, strings.Join(names, ", "))
		}
		if !p.Required || p.Schema.Default != nil {
			return fmt.Errorf("#%s.%s: a path parameter is always present; make the field required, without a default", s.Name, p.Name)
		}
		delete(in, p.Name)
	}
	for _, n := range names {
		if in[n] {
			return fmt.Errorf("#%s: no field for the path parameter {%s} of %s", s.Name, n, path)
		}
	}
	return nil
}

// checkQuery refuses a query schema that is not a struct of scalars.
func checkQuery(s *Schema) error { return checkScalars(s, "query") }

// checkScalars refuses a parameters schema (in: "query" or "path") that
// is not a struct of strings, numbers and bools.
func checkScalars(s *Schema, in string) error {
	if s.Type != "object" {
		return fmt.Errorf("#%s: %s parameters must be a struct (it is %s)", s.Name, in, s.Type)
	}
	for _, p := range s.Props {
		switch p.Schema.Type {
		case "string", "integer", "number", "boolean":
			if p.Schema.Format == "date-time" {
				return fmt.Errorf("#%s.%s: a %s parameter may not be a time; use a string", s.Name, p.Name, in)
			}
		default:
			return fmt.Errorf("#%s.%s: a %s parameter must be a string, number or bool (it is %s)", s.Name, p.Name, in, kindName(p.Schema))
		}
	}
	return nil
}

func kindName(s *Schema) string {
	if s.Ref != "" {
		return "#" + s.Ref
	}
	return s.Type
}

// refs lists the definitions s refers to.
func refs(s *Schema) []string {
	var out []string
	if s.Ref != "" {
		out = append(out, s.Ref)
	}
	if s.Items != nil {
		out = append(out, refs(s.Items)...)
	}
	for _, p := range s.Props {
		out = append(out, refs(p.Schema)...)
	}
	return out
}

// int64Bound is how the encoder writes int64's own range: not a
// constraint of the user's.
const int64Bound = 9.2e18

// readSchema reads one schema of the encoder's output. Keywords outside
// the rendered subset are refused with path, the definition's CUE path.
func readSchema(v cue.Value, path string) (*Schema, error) {
	s := &Schema{}
	it, err := v.Fields()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var required []string
	var props cue.Value
	for it.Next() {
		key, fv := it.Selector().Unquoted(), it.Value()
		var err error
		switch key {
		case "$ref":
			var ref string
			if ref, err = fv.String(); err == nil {
				s.Ref = strings.TrimPrefix(ref, "#/components/schemas/")
			}
		case "type":
			s.Type, err = fv.String()
		case "format":
			s.Format, err = fv.String()
		case "description":
			s.Description, err = fv.String()
		case "pattern":
			s.Pattern, err = fv.String()
		case "minLength":
			s.MinLength, err = intPtr(fv)
		case "maxLength":
			s.MaxLength, err = intPtr(fv)
		case "minItems":
			s.MinItems, err = intPtr(fv)
		case "maxItems":
			s.MaxItems, err = intPtr(fv)
		case "minimum":
			s.Minimum, err = number(fv)
		case "maximum":
			s.Maximum, err = number(fv)
		case "exclusiveMinimum":
			s.ExclMin, err = fv.Bool()
		case "exclusiveMaximum":
			s.ExclMax, err = fv.Bool()
		case "enum":
			var raw []json.RawMessage
			var b []byte
			if b, err = fv.MarshalJSON(); err == nil {
				err = json.Unmarshal(b, &raw)
			}
			s.Enum = raw
		case "default":
			s.Default, err = fv.MarshalJSON()
		case "required":
			err = fv.Decode(&required)
		case "properties":
			props = fv
		case "items":
			s.Items, err = readSchema(fv, path+"[]")
		default:
			return nil, fmt.Errorf("%s: the generator cannot render this schema (JSON Schema keyword %q: disjunctions of structs, maps and open structs have no Go type here)", path, key)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, key, err)
		}
	}
	if s.Ref != "" {
		if s.Type != "" || props.Exists() {
			return nil, fmt.Errorf("%s: the generator cannot render a reference with constraints of its own", path)
		}
		return s, nil
	}
	switch s.Type {
	case "object":
		if !props.Exists() {
			return nil, fmt.Errorf("%s: the generator cannot render a struct without fields (an open struct or a map)", path)
		}
		req := map[string]bool{}
		for _, r := range required {
			req[r] = true
		}
		pit, err := props.Fields()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for pit.Next() {
			name := pit.Selector().Unquoted()
			ps, err := readSchema(pit.Value(), path+"."+name)
			if err != nil {
				return nil, err
			}
			if goField(name) == "" {
				return nil, fmt.Errorf("%s.%s: the field name has no Go form", path, name)
			}
			s.Props = append(s.Props, &Prop{Name: name, Required: req[name], Schema: ps})
		}
	case "array":
		if s.Items == nil {
			return nil, fmt.Errorf("%s: the generator cannot render a list without an element type", path)
		}
	case "string", "number", "boolean":
	case "integer":
		// The encoder writes int64's own range as a bound: not the user's.
		if f, err := s.Maximum.Float64(); err == nil && f >= int64Bound {
			s.Maximum = ""
		}
		if f, err := s.Minimum.Float64(); err == nil && f <= -int64Bound {
			s.Minimum = ""
		}
	case "":
		return nil, fmt.Errorf("%s: the generator cannot render a value without a single type (a disjunction of kinds, or top)", path)
	default:
		return nil, fmt.Errorf("%s: the generator cannot render type %q", path, s.Type)
	}
	if s.Type == "integer" {
		// Every integer is an int64 in Go; the document says so even where
		// the encoder left the format out (a bounded int64, or int).
		s.Format = "int64"
	}
	return s, nil
}

func intPtr(v cue.Value) (*int64, error) {
	n, err := v.Int64()
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func number(v cue.Value) (json.Number, error) {
	b, err := v.MarshalJSON()
	if err != nil {
		return "", err
	}
	n := json.Number(b)
	if f, err := n.Float64(); err != nil || math.IsInf(f, 0) {
		return "", fmt.Errorf("not a number: %s", b)
	}
	return n, nil
}

// goField is a JSON name's Go field name (created_at → CreatedAt, id → ID).
func goField(name string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if up := strings.ToUpper(part); initialisms[up] {
			b.WriteString(up)
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	out := b.String()
	if out == "" || !(out[0] >= 'A' && out[0] <= 'Z') {
		return ""
	}
	for _, r := range out {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return out
}

var initialisms = map[string]bool{"ID": true, "URL": true, "HTTP": true, "JSON": true, "API": true, "IP": true, "UUID": true}
