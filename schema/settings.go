package schema

import (
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
)

// SettingField is one field of the service's #Settings (settings.cue), as
// the generator types it into gen/settings.
type SettingField struct {
	// Name is the field's name in the spec (snake_case).
	Name string
	// Doc is the field's comment in settings.cue, without comment markers.
	Doc string
	// Kind is "int64", "float64", "string", "bool", "list" or "struct".
	Kind string
	// Elem is a list's element (its Name empty).
	Elem *SettingField
	// Fields are a struct's fields, in declaration order.
	Fields []SettingField
}

// SettingsFields reads #Settings from Definitions: every regular field
// with the Go kind its CUE type allows. A field whose type is none of int,
// number, string, bool, a list of one of them or a struct of them is an
// error naming it: the generator could not type it.
func SettingsFields() ([]SettingField, error) {
	ctx := cuecontext.New()
	defs := ctx.CompileString(Definitions, cue.Filename("cellgate.cue"))
	if err := defs.Err(); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	v := defs.LookupPath(cue.ParsePath("#Settings"))
	if !v.Exists() {
		return nil, fmt.Errorf("schema: #Settings is not declared")
	}
	return structFields(v, "settings")
}

func structFields(v cue.Value, path string) ([]SettingField, error) {
	it, err := v.Fields(cue.Optional(false))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []SettingField
	for it.Next() {
		name := it.Selector().String()
		f, err := settingField(it.Value(), path+"."+name)
		if err != nil {
			return nil, err
		}
		f.Name = name
		out = append(out, f)
	}
	return out, nil
}

func settingField(v cue.Value, path string) (SettingField, error) {
	var f SettingField
	for _, cg := range v.Doc() {
		f.Doc += cg.Text()
	}
	f.Doc = strings.TrimSpace(f.Doc)
	switch k := v.IncompleteKind(); k {
	case cue.IntKind:
		f.Kind = "int64"
	case cue.FloatKind, cue.NumberKind:
		f.Kind = "float64"
	case cue.StringKind:
		f.Kind = "string"
	case cue.BoolKind:
		f.Kind = "bool"
	case cue.ListKind:
		f.Kind = "list"
		e, err := settingField(v.LookupPath(cue.MakePath(cue.AnyIndex)), path+"[]")
		if err != nil {
			return f, err
		}
		if e.Kind == "list" {
			return f, fmt.Errorf("%s: a list of lists is not supported in #Settings; use a list of structs", path)
		}
		e.Doc = ""
		f.Elem = &e
	case cue.StructKind:
		f.Kind = "struct"
		fs, err := structFields(v, path)
		if err != nil {
			return f, err
		}
		f.Fields = fs
	default:
		return f, fmt.Errorf("%s: its type (%s) is not one of int, number, string, bool, a list or a struct; the generator cannot type it", path, k)
	}
	return f, nil
}
