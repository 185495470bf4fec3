package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// OverlayJSON applies a per-cell JSON document to base and returns the
// typed result; name labels errors. It knows no schema: a list entry the
// document writes in part keeps Go zero values for the rest, which is why
// processes load through configload (Merge, then the CUE definitions fill
// the defaults); tests and tools that write whole entries use this. The file is
// checked against Config's shape first (CheckShape), so a typo or a
// mistyped value is an error naming its full spec path and line; then it
// is merged over base's JSON with Merge (lists replace whole lists, a null
// list is empty) and decoded.
func OverlayJSON(base Config, raw []byte, name string) (Config, error) {
	if es := CheckShape(raw); len(es) > 0 {
		return base, &FileError{File: name, Errs: es}
	}
	merged, err := Merge(base.JSON(), raw)
	if err != nil {
		return base, fmt.Errorf("config file %s: %w", name, err)
	}
	cfg, err := Decode(merged)
	if err != nil {
		return base, fmt.Errorf("config file %s: %w", name, err)
	}
	return cfg, nil
}

// Decode reads a config document into the typed form, refusing fields the
// Go side does not know so the schema and Config cannot drift apart.
func Decode(raw []byte) (Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(&cfg)
	return cfg, err
}

// FileError lists the shape errors of one config file.
type FileError struct {
	// File names the file.
	File string
	// Errs are its problems in document order.
	Errs FieldErrors
}

func (e *FileError) Error() string {
	var b strings.Builder
	for i, fe := range e.Errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s (%s:%d)", fe.Error(), e.File, fe.Line)
	}
	return b.String()
}

// Clone returns a deep copy of c, so an overlay never writes through a
// slice shared with the generated defaults.
func (c Config) Clone() Config {
	raw, err := json.Marshal(c)
	if err != nil {
		// Config holds only JSON-encodable fields.
		panic(fmt.Sprintf("config: clone: %v", err))
	}
	var out Config
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(fmt.Sprintf("config: clone: %v", err))
	}
	return out
}

// JSON returns c in the spec's JSON form, the input of schema.Check and the
// policy.
//
// Nil lists are written as [] (the schema's empty list), never null.
func (c Config) JSON() []byte {
	c = c.Clone()
	fillSlices(reflect.ValueOf(&c).Elem())
	raw, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("config: marshal: %v", err))
	}
	return raw
}

// fillSlices replaces nil slices in v (addressable) with empty ones; JSON
// calls it on a clone, so the caller's slices are never written.
func fillSlices(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillSlices(v.Field(i))
		}
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
	case reflect.Slice:
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		for i := range v.Len() {
			fillSlices(v.Index(i))
		}
	}
}

// Indent spreads a JSON document over lines (two-space indent), so
// positions in messages point at one field each.
func Indent(raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return raw
	}
	return b.Bytes()
}
