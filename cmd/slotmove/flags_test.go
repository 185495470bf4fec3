package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShardMoveFlags: the shard mode's flag errors name the bad flag or
// value before anything connects.
func TestShardMoveFlags(t *testing.T) {
	layout := filepath.Join(t.TempDir(), "layout.json")
	if err := os.WriteFile(layout, []byte(`{"cells":{"cell-1":[{"name":"shard-0","dsn_env":"S0"},{"name":"shard-1","dsn_env":"S1"}],
		"cell-2":[{"name":"shard-0","dsn_env":"S0"}],
		"cell-3":[{"name":"shard-0","dsn_env":"S0"},{"name":"shard-1","dsn_env":"S1"}]},"control":{"cell-1":"CTL"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"S0": "postgres://a", "S1": "postgres://b", "CTL": "postgres://c"}
	getenv := func(k string) string { return env[k] }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := []string{"-layout", layout, "-slots", "4096-8191"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cell", "cell-1", "-from-shard", "shard-0"}, "needs -cell, -from-shard, -to-shard, -layout and -slots"},
		{[]string{"-cell", "cell-1", "-from-shard", "shard-0", "-to-shard", "shard-0"}, `-from-shard and -to-shard are both "shard-0"`},
		{[]string{"-cell", "cell-9", "-from-shard", "shard-0", "-to-shard", "shard-1"}, `-cell "cell-9": the layout`},
		{[]string{"-cell", "cell-1", "-from-shard", "shard-0", "-to-shard", "shard-7"}, `-to-shard "shard-7": cell cell-1 has no such shard in the layout (it has shard-0, shard-1)`},
		{[]string{"-cell", "cell-2", "-from-shard", "shard-0", "-to-shard", "shard-1"}, `-to-shard "shard-1"`},
		{[]string{"-cell", "cell-1", "-from-shard", "shard-0", "-to-shard", "shard-1", "-from", "cell-1"}, "drop -map, -from, -to and -routers"},
		{[]string{"-cell", "cell-1", "-from-shard", "shard-0", "-to-shard", "shard-1", "-slots", "9-x"}, "-slots:"},
	} {
		fs := append(append([]string(nil), base...), c.args...)
		err := run(context.Background(), fs, log, getenv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	// A cell the layout names no control database for: its shard map
	// lives there.
	err := run(context.Background(), append(base, "-cell", "cell-3", "-from-shard", "shard-0", "-to-shard", "shard-1"), log, getenv)
	if err == nil || !strings.Contains(err.Error(), `-cell "cell-3": the layout`) || !strings.Contains(err.Error(), "names no control database") {
		t.Errorf("no control database: %v", err)
	}
}

// TestCellMoveNamesEveryMissingCell: a move between cells that the layout
// cannot resolve on either side says so for both at once, so the operator
// fixes the layout in one go.
func TestCellMoveNamesEveryMissingCell(t *testing.T) {
	dir := t.TempDir()
	layout := filepath.Join(dir, "layout.json")
	if err := os.WriteFile(layout, []byte(`{"cells":{"cell-1":[{"name":"shard-0","dsn_env":"S0"}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	getenv := func(string) string { return "" }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := run(context.Background(), []string{"-map", filepath.Join(dir, "slots.json"), "-layout", layout,
		"-slots", "0-99", "-from", "cell-1", "-to", "cell-2"}, log, getenv)
	if err == nil {
		t.Fatal("a layout without cell-2 and without S0 set: no error")
	}
	for _, want := range []string{`cells.cell-1[0] (shard-0): environment variable "S0" is not set`, `no shards for cell "cell-2"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
