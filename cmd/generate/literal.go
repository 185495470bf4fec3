package main

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/config"
)

// goLiteral renders v as a Go composite literal of the package config.
// Zero-valued scalar fields are left out so the generated spec reads like the CUE
// that produced it; output order is field order, so it is deterministic.
func goLiteral(v any) (string, error) {
	var b strings.Builder
	if err := writeLiteral(&b, reflect.ValueOf(v)); err != nil {
		return "", err
	}
	return b.String(), nil
}

var durationType = reflect.TypeFor[config.Duration]()

func writeLiteral(b *strings.Builder, v reflect.Value) error {
	if v.Type() == durationType {
		fmt.Fprintf(b, "config.Duration(%d) /* %s */", v.Int(), time.Duration(v.Int()))
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		// A settings value as encoding/json decodes it: its dynamic type
		// is written out (float64(50), not 50, which would read as an int).
		if v.IsNil() {
			b.WriteString("nil")
			return nil
		}
		e := v.Elem()
		if e.Kind() == reflect.Float64 {
			b.WriteString("float64(" + strconv.FormatFloat(e.Float(), 'g', -1, 64) + ")")
			return nil
		}
		return writeLiteral(b, e)
	case reflect.Struct:
		b.WriteString(typeName(v.Type()))
		b.WriteString("{\n")
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			// Zero scalars are left out; slices are always written, empty
			// ones as T{}, so the config marshals lists as [] and not null.
			if f.Kind() != reflect.Slice && f.IsZero() {
				continue
			}
			b.WriteString(v.Type().Field(i).Name)
			b.WriteString(": ")
			if err := writeLiteral(b, f); err != nil {
				return err
			}
			b.WriteString(",\n")
		}
		b.WriteString("}")
	case reflect.Slice:
		b.WriteString("[]")
		b.WriteString(typeName(v.Type().Elem()))
		b.WriteString("{")
		for i := 0; i < v.Len(); i++ {
			if v.Index(i).Kind() == reflect.Struct {
				b.WriteString("\n")
			}
			if err := writeLiteral(b, v.Index(i)); err != nil {
				return err
			}
			b.WriteString(", ")
		}
		if v.Len() > 0 && v.Index(0).Kind() == reflect.Struct {
			b.WriteString("\n")
		}
		b.WriteString("}")
	case reflect.Map:
		// Keys sorted: the literal must not depend on map order.
		b.WriteString(v.Type().String())
		b.WriteString("{")
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writeLiteral(b, k); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := writeLiteral(b, v.MapIndex(k)); err != nil {
				return err
			}
		}
		b.WriteString("}")
	case reflect.String:
		b.WriteString(strconv.Quote(v.String()))
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Float64:
		b.WriteString(strconv.FormatFloat(v.Float(), 'g', -1, 64))
	default:
		return fmt.Errorf("goLiteral: unsupported kind %s", v.Kind())
	}
	return nil
}

// typeName qualifies the config package's types; builtins stay bare.
func typeName(t reflect.Type) string {
	if t.PkgPath() == durationType.PkgPath() {
		return "config." + t.Name()
	}
	return t.String()
}
