package configload

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
)

// generateVerdict is what cmd/generate decides for a whole config written
// as a CUE spec (config: #Config & <json>): ValidateSpec, the generator's
// own call, in mode Final, so a multi-cell config without server.cell is
// judged as the process would judge it.
func generateVerdict(tb testing.TB, full []byte) ([]string, error) {
	tb.Helper()
	dir := writeSpec(tb, "package cellgate\n\nconfig: #Config & "+string(full)+"\n")
	_, _, _, err := validateSpecDir(dir, Final)
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Paths(), err
	}
	return nil, err
}

// FuzzOverlayVerdict: an overlay never panics the loader, and when it
// merges, `server check` (Validate on the final config) and the generator
// (the same config as a CUE spec) give the same verdict and name the same
// paths.
func FuzzOverlayVerdict(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"server":{"address":"8080"}}`, `{"jobs":{"workers":0}}`,
		`{"server":{"shutdown_timeout":"0s"}}`, `{"tenancy":{"source":"cookie"}}`,
		`{"database":{"shards":[{"name":"shard-0","dsn_env":"A","slots":["007"]}]}}`,
		`{"cells":[{"name":"a","url":"http://u:p@a:1"}]}`, `{"tenancy":{"public_paths":["/a/*/b"]}}`,
		`{"tenancy":{"enabled":true,"rate_per_second":5,"burst":0}}`,
		`{"cells":[{"name":"a","url":"http://a:1","slots":["0-8191"]},{"name":"b","url":"http://b:1","slots":["8192-16383"]}]}`,
	} {
		f.Add([]byte(s), "", "")
	}
	// Overlays of one setting: random bytes are rarely a JSON object whose
	// fields the config has, so the fuzzer also sets one value at a path.
	for _, s := range [][2]string{
		{"jobs.workers", "3"}, {"jobs.tenants.lanes", "9"}, {"server.address", `":0"`},
		{"tenancy.source", `"jwt"`}, {"server.cell", `"cell-1"`}, {"jobs.shutdown_timeout", `"1h"`},
		{"admission.shards", "2"}, {"tenancy.max_concurrent_requests", "4"},
	} {
		f.Add([]byte(`{}`), s[0], s[1])
	}
	defaults := spec.Config()
	f.Fuzz(func(t *testing.T, raw []byte, path, value string) {
		raw = withValue(raw, path, value)
		cfg, err := config.OverlayJSON(defaults, raw, "cell.json")
		if err != nil {
			return
		}
		full := config.Indent(cfg.JSON())
		_, _, checkErr := Validate(context.Background(), full, "cell.json", Final)
		genPaths, genErr := generateVerdict(t, full)
		if (checkErr == nil) != (genErr == nil) {
			t.Fatalf("verdicts differ for %s:\ncheck: %v\ngenerate: %v", raw, checkErr, genErr)
		}
		var ce *Error
		if errors.As(checkErr, &ce) {
			a, b := slices.Sorted(slices.Values(ce.Paths())), slices.Sorted(slices.Values(genPaths))
			if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
				t.Fatalf("paths differ for %s:\ncheck: %q\ngenerate: %q\n%v", raw, a, b, genErr)
			}
		}
	})
}

// withValue sets value (JSON, or else a string) at the dotted path in the
// JSON object raw (an empty object when raw is not one); an empty path
// leaves raw as it is.
func withValue(raw []byte, path, value string) []byte {
	if path == "" {
		return raw
	}
	var doc map[string]any
	if json.Unmarshal(raw, &doc) != nil || doc == nil {
		doc = map[string]any{}
	}
	var v any
	if json.Unmarshal([]byte(value), &v) != nil {
		v = value
	}
	keys := strings.Split(path, ".")
	cur := doc
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	cur[keys[len(keys)-1]] = v
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}
