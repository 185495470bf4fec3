package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Overlay applies a per-cell JSON file to base and returns the result.
// Fields the file names replace base's (lists replace whole lists); fields
// it omits keep base's value. Unknown fields are an error naming the field,
// so a typo cannot silently fall back to a default. An empty path returns
// base unchanged.
func Overlay(base Config, path string) (Config, error) {
	if path == "" {
		return base, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("config file: %w", err)
	}
	return OverlayJSON(base, raw, path)
}

// OverlayJSON is Overlay on bytes; name labels errors.
func OverlayJSON(base Config, raw []byte, name string) (Config, error) {
	cfg := base.Clone()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return base, fmt.Errorf("config file %s: %w", name, err)
	}
	return cfg, nil
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
func (c Config) JSON() []byte {
	raw, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("config: marshal: %v", err))
	}
	return raw
}
