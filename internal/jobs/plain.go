package jobs

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
)

// An in-process backend can hand a handler the very value that was enqueued
// instead of decoding its JSON, which is most of the cost of a small job. It
// may do so only where the two cannot differ, so that a kind that works on
// the local backend works the same on PostgreSQL. plainArgs decides that once
// per type at Register; Enqueue adds a per-value check (invalidUTF8Marker).

// invalidUTF8Marker is how encoding/json writes an invalid UTF-8 byte of a
// string (a valid U+FFFD is written raw). Its presence means the decoded
// string would differ from the original, so the value is not handed over.
var invalidUTF8Marker = []byte(`\ufffd`)

// handOver reports whether the encoded form of a value of a plain type
// decodes back to an equal value.
func handOver(enc []byte) bool { return !bytes.Contains(enc, invalidUTF8Marker) }

var (
	jsonMarshalerType   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// plainArgs reports whether a JSON round trip of any value of t (that encodes
// without error and without invalid UTF-8) gives back an equal value with no
// memory shared with the original: booleans, numbers, strings, and arrays and
// structs of them, with exported, non-embedded fields whose JSON names are
// distinct (case-insensitively, as decoding matches them), and no custom
// (un)marshalling. Pointers, slices, maps and interfaces are excluded because
// the value would share memory with the caller or change type (any decodes
// as map[string]any).
func plainArgs(t reflect.Type) bool {
	return plainType(t, 0)
}

func plainType(t reflect.Type, depth int) bool {
	if depth > 8 {
		return false
	}
	for _, it := range []reflect.Type{jsonMarshalerType, jsonUnmarshalerType, textMarshalerType, textUnmarshalerType} {
		if t.Implements(it) || reflect.PointerTo(t).Implements(it) {
			return false
		}
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Array:
		return plainType(t.Elem(), depth+1)
	case reflect.Struct:
		names := make(map[string]bool, t.NumField())
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Anonymous {
				return false
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				return false
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			key := strings.ToLower(name)
			if names[key] || !plainType(f.Type, depth+1) {
				return false
			}
			names[key] = true
		}
		return true
	}
	return false
}
