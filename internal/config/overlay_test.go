package config

import (
	"strings"
	"testing"
)

func twoShards() Config {
	c := base()
	c.Database.Shards = []Shard{
		{Name: "shard-0", DSNEnv: "A", Slots: []string{"0-8191"}, MaxConns: 10},
		{Name: "shard-1", DSNEnv: "B", Slots: []string{"8192-16383"}, MaxConns: 10},
	}
	return c
}

// TestOverlayListReplacesWholeList: a per-cell shards list is the list;
// no entry inherits the default entry at its index.
func TestOverlayListReplacesWholeList(t *testing.T) {
	got, err := OverlayJSON(twoShards(), []byte(`{"database":{"shards":[{"name":"shard-1","dsn_env":"B"}]}}`), "cell.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Database.Shards) != 1 {
		t.Fatalf("shards = %+v, want exactly the one listed", got.Database.Shards)
	}
	if s := got.Database.Shards[0]; len(s.Slots) != 0 || s.MaxConns != 0 {
		t.Fatalf("shard inherited the default entry at index 0: %+v", s)
	}
}

// TestOverlayNullListIsEmpty: null where a list belongs means an empty list.
func TestOverlayNullListIsEmpty(t *testing.T) {
	b := base()
	b.Tenancy.PublicPaths = []string{"/docs"}
	got, err := OverlayJSON(b, []byte(`{"tenancy":{"public_paths":null}}`), "cell.json")
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenancy.PublicPaths == nil || len(got.Tenancy.PublicPaths) != 0 {
		t.Fatalf("public_paths = %#v, want empty", got.Tenancy.PublicPaths)
	}
	if _, err := OverlayJSON(b, []byte(`{"server":null}`), "cell.json"); err == nil || !strings.Contains(err.Error(), "server: must be an object; got null") {
		t.Fatalf("null object: %v", err)
	}
}

// TestOverlayErrorsNameSpecPaths: type errors, bad durations and unknown
// fields name the full spec path and the line, all at once.
func TestOverlayErrorsNameSpecPaths(t *testing.T) {
	raw := "{\n\"server\": {\"address\": 8080},\n\"tenancy\": {\"request_timeout\": 1},\n\"jobs\": {\"shutdown_timeout\": \"30 s\"},\n\"database\": {\"shards\": [{\"name\": \"a\", \"dsn_env\": \"A\", \"bogus\": true}]}\n}"
	_, err := OverlayJSON(base(), []byte(raw), "cell.json")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"server.address: must be a string; got 8080 (cell.json:2)",
		"tenancy.request_timeout: unknown field",
		`jobs.shutdown_timeout: "30 s" is not a duration; write e.g. "30s" (cell.json:4)`,
		"database.shards[0].bogus: unknown field",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "Go value") {
		t.Errorf("error names Go types: %v", err)
	}
}

// FuzzOverlay: no input panics, and an accepted overlay gives a config
// whose JSON is accepted again as an overlay (a fixed point).
func FuzzOverlay(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"server":{"address":":1"}}`, `{"database":{"shards":null}}`,
		`{"database":{"shards":[{"name":"x","slots":["0-1"]}]}}`, `{"cells":[{"name":"c","url":"http://a"}]}`,
		`{"jobs":{"kinds":[{"name":"k","args":[{"name":"a","type":"int64"}],"timeout":"1s"}]}}`,
		`[1]`, `{"server":{"address":{}}}`, `{"a":`, `{"server":{"shutdown_timeout":"9999999999h"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := OverlayJSON(twoShards(), raw, "fuzz.json")
		if err != nil {
			return
		}
		again, err := OverlayJSON(twoShards(), got.JSON(), "again.json")
		if err != nil {
			t.Fatalf("an accepted overlay's result is refused as an overlay: %v", err)
		}
		if string(again.JSON()) != string(got.JSON()) {
			t.Fatalf("not a fixed point:\n%s\n%s", got.JSON(), again.JSON())
		}
	})
}
