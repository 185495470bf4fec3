package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FieldError is one problem of a JSON config, named by its spec path in
// index style (cells[0].slots[2]).
type FieldError struct {
	// Path is the spec path of the bad value.
	Path string
	// Msg says what is wrong and what is accepted.
	Msg string
	// Line is the 1-based line of the value in its file (0 when unknown).
	Line int
}

func (e FieldError) Error() string { return e.Path + ": " + e.Msg }

// FieldErrors is every problem found in one document, in document order.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

var configType = reflect.TypeFor[Config]()

// CheckShape checks a JSON document against the shape of Config without
// decoding it: every object key must be a field (unknown fields are named
// with their full path), every value must have its field's JSON type, and
// every duration must parse. null counts as an empty list where a list
// belongs (docs/policy.md) and as "keep the default" nowhere else: a null
// scalar or object is an error. Positions are lines of raw.
func CheckShape(raw []byte) FieldErrors {
	var es FieldErrors
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	w := walker{dec: dec, raw: raw, errs: &es}
	w.value(configType, "")
	if len(es) == 0 {
		if _, err := dec.Token(); err == nil {
			es = append(es, FieldError{Msg: "trailing data after the JSON object"})
		}
	}
	return es
}

// walker reads one JSON document token by token, comparing it with a Go
// type, so each error knows its path and line.
type walker struct {
	dec  *json.Decoder
	raw  []byte
	errs *FieldErrors
}

func (w *walker) fail(path string, off int64, format string, args ...any) {
	*w.errs = append(*w.errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Line: 1 + bytes.Count(w.raw[:min(int(off), len(w.raw))], []byte("\n"))})
}

// value reads one value at path and checks it against t. It returns false
// when the document cannot be read further (a syntax error).
func (w *walker) value(t reflect.Type, path string) bool {
	off := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		w.fail(path, off, "not valid JSON: %v", err)
		return false
	}
	label := cmp.Or(path, "(document)")
	if tok == nil { // null
		if t.Kind() != reflect.Slice {
			w.fail(label, off, "must be %s; got null (leave the field out to keep its default)", jsonKind(t))
		}
		return true
	}
	if t == reflect.TypeFor[Duration]() {
		s, ok := tok.(string)
		if !ok {
			w.fail(label, off, "must be a duration string; got %s; write e.g. \"30s\"", describeToken(tok))
			return w.skip(tok)
		}
		if _, err := time.ParseDuration(s); err != nil {
			w.fail(label, off, "%q is not a duration; write e.g. \"30s\"", s)
		}
		return true
	}
	switch t.Kind() {
	case reflect.Interface:
		// Any JSON value: the service's settings, whose shape CUE checks
		// (#Settings), not Go.
		return w.skip(tok)
	case reflect.Struct:
		if tok != json.Delim('{') {
			w.fail(label, off, "must be an object; got %s", describeToken(tok))
			return w.skip(tok)
		}
		fields := jsonFields(t)
		for w.dec.More() {
			koff := w.dec.InputOffset()
			kt, err := w.dec.Token()
			if err != nil {
				w.fail(label, koff, "not valid JSON: %v", err)
				return false
			}
			key, _ := kt.(string)
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			ft, ok := fields[key]
			if !ok {
				w.fail(sub, koff, "unknown field; known fields here: %s", strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
				if !w.skipValue() {
					return false
				}
				continue
			}
			if !w.value(ft, sub) {
				return false
			}
		}
		_, err := w.dec.Token() // }
		return err == nil
	case reflect.Map:
		if tok != json.Delim('{') {
			w.fail(label, off, "must be an object; got %s", describeToken(tok))
			return w.skip(tok)
		}
		for w.dec.More() {
			koff := w.dec.InputOffset()
			kt, err := w.dec.Token()
			if err != nil {
				w.fail(label, koff, "not valid JSON: %v", err)
				return false
			}
			key, _ := kt.(string)
			if !w.value(t.Elem(), path+"."+key) {
				return false
			}
		}
		_, err := w.dec.Token() // }
		return err == nil
	case reflect.Slice:
		if tok != json.Delim('[') {
			w.fail(label, off, "must be a list; got %s", describeToken(tok))
			return w.skip(tok)
		}
		for i := 0; w.dec.More(); i++ {
			if !w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)) {
				return false
			}
		}
		_, err := w.dec.Token() // ]
		return err == nil
	case reflect.String:
		if _, ok := tok.(string); !ok {
			w.fail(label, off, "must be a string; got %s", describeToken(tok))
			return w.skip(tok)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			w.fail(label, off, "must be true or false; got %s", describeToken(tok))
			return w.skip(tok)
		}
	case reflect.Int, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			w.fail(label, off, "must be an integer; got %s", describeToken(tok))
			return w.skip(tok)
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			w.fail(label, off, "must be an integer; got %s", n)
		}
	case reflect.Float64:
		if _, ok := tok.(json.Number); !ok {
			w.fail(label, off, "must be a number; got %s", describeToken(tok))
			return w.skip(tok)
		}
	}
	return true
}

// skip consumes the rest of a value whose first token was tok.
func (w *walker) skip(tok json.Token) bool {
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		depth := 1
		for depth > 0 {
			t, err := w.dec.Token()
			if err != nil {
				return false
			}
			if d, ok := t.(json.Delim); ok {
				if d == '{' || d == '[' {
					depth++
				} else {
					depth--
				}
			}
		}
	}
	return true
}

func (w *walker) skipValue() bool {
	tok, err := w.dec.Token()
	if err != nil {
		return false
	}
	return w.skip(tok)
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "a list"
	case string:
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return fmt.Sprint(tok)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	}
	return t.Kind().String()
}

// jsonFields maps a struct's JSON names to field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// Merge applies an overlay document to a base document, both JSON objects:
// objects merge key by key, anything else (lists, scalars) replaces the
// base's value whole, and a null list is an empty list. The result is JSON.
// Merge assumes both passed CheckShape.
func Merge(base, overlay []byte) ([]byte, error) {
	var b, o map[string]any
	if err := unmarshalNumbers(base, &b); err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	if err := unmarshalNumbers(overlay, &o); err != nil {
		return nil, err
	}
	return json.Marshal(mergeObjects(b, o))
}

func unmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func mergeObjects(base, overlay map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(overlay))
	maps.Copy(out, base)
	for k, v := range overlay {
		bo, bok := out[k].(map[string]any)
		oo, ook := v.(map[string]any)
		switch {
		case bok && ook:
			out[k] = mergeObjects(bo, oo)
		case v == nil && !bok:
			out[k] = []any{} // CheckShape allows null only for lists
		case v == nil:
			out[k] = nil // an object: the schema check refuses it
		default:
			out[k] = v
		}
	}
	return out
}
