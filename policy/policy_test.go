package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestEvalDefaultConfig(t *testing.T) {
	e := newEvaluator(t)
	r, err := e.Eval(context.Background(), loadConfig(t, "testdata/default.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deny) != 0 || len(r.Warn) != 0 {
		t.Fatalf("default config: deny %q, warn %q; want none", r.Deny, r.Warn)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %v, want nil", err)
	}
}

// edit returns a copy of the default config changed by fn.
func edit(tb testing.TB, fn func(cfg map[string]any)) map[string]any {
	tb.Helper()
	cfg := loadConfig(tb, "testdata/default.json")
	fn(cfg)
	return cfg
}

func obj(v any, keys ...string) map[string]any {
	m := v.(map[string]any)
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}

func TestEvalBrokenConfigs(t *testing.T) {
	e := newEvaluator(t)
	cases := []struct {
		name     string
		edit     func(cfg map[string]any)
		wantDeny []string // exact messages, in sorted order
		wantWarn []string // message prefixes that must be present
	}{
		{
			name: "lanes above workers",
			edit: func(cfg map[string]any) {
				jobs := obj(cfg, "jobs")
				jobs["backend"] = "local"
				obj(jobs, "postgres")["shard_local"] = false
				jobs["workers"] = 8
				obj(jobs, "tenants")["lanes"] = 12
				obj(jobs, "tenants")["lanes_per_tenant"] = 2
			},
			wantDeny: []string{
				"jobs.tenants.lanes: 12 lanes but only 8 workers; worker i serves lane i % lanes, so lanes past jobs.workers have no worker (the runtime would clamp to 8); set lanes <= workers",
			},
		},
		{
			name: "slot gap and shard_local on local backend",
			edit: func(cfg map[string]any) {
				shards := obj(cfg, "database")["shards"].([]any)
				obj(shards[0])["slots"] = []any{"0-8191"}
				obj(shards[1])["slots"] = []any{"8193-16383"}
				obj(cfg, "jobs")["backend"] = "local"
			},
			wantDeny: []string{
				"database.shards: slot 8192 has no shard",
				`jobs.postgres.shard_local: true needs jobs.backend "postgres", not "local"; shard-local job tables live in the shard databases`,
			},
		},
		{
			name: "caps with a header source",
			edit: func(cfg map[string]any) {
				obj(cfg, "tenancy")["max_concurrent_requests"] = 16
				obj(cfg, "server")["max_concurrent_requests"] = 512
			},
			wantWarn: []string{`tenancy.source: "header" lets the client choose its tenant id`},
		},
		{
			name: "shard straddles cells",
			edit: func(cfg map[string]any) {
				cfg["cells"] = []any{
					map[string]any{"name": "a", "url": "http://a", "slots": []any{"0-4095"}},
					map[string]any{"name": "b", "url": "http://b", "slots": []any{"4096-16383"}},
				}
			},
			wantDeny: []string{
				"database.shards[0] (shard-0): slots straddle cells a, b; a cell must own whole shards, so move the cell boundary to a shard boundary",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := e.Eval(context.Background(), edit(t, c.edit))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Deny, c.wantDeny) {
				t.Errorf("deny:\n got %q\nwant %q", r.Deny, c.wantDeny)
			}
			for _, w := range c.wantWarn {
				if !slices.ContainsFunc(r.Warn, func(m string) bool { return strings.HasPrefix(m, w) }) {
					t.Errorf("warn %q missing from %q", w, r.Warn)
				}
			}
			err = r.Err()
			if (err != nil) != (len(c.wantDeny) > 0) {
				t.Fatalf("Err() = %v with deny %q", err, r.Deny)
			}
			var de *DenyError
			if err != nil {
				if !errors.As(err, &de) || !slices.Equal(de.Deny, r.Deny) {
					t.Fatalf("Err() = %#v, want a *DenyError with the deny list", err)
				}
				for _, m := range r.Deny {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("Err() text lacks %q:\n%s", m, err)
					}
				}
			}
		})
	}
}

func TestResultIsSorted(t *testing.T) {
	e := newEvaluator(t)
	cfg := edit(t, func(cfg map[string]any) {
		tn := obj(cfg, "tenancy")
		tn["enabled"] = false
		tn["max_concurrent_requests"] = 4
		tn["burst"] = 3
		obj(cfg, "jobs")["backend"] = "local"
		obj(cfg, "jobs", "tenants")["lanes"] = 9
		obj(cfg, "admission")["overage_allowance"] = 5
		obj(cfg, "database")["shards"].([]any)[1].(map[string]any)["name"] = "shard-0"
	})
	first, err := e.Eval(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Deny) < 3 || len(first.Warn) < 2 {
		t.Fatalf("want several messages, got deny %q warn %q", first.Deny, first.Warn)
	}
	if !slices.IsSorted(first.Deny) || !slices.IsSorted(first.Warn) {
		t.Fatalf("unsorted result: %q %q", first.Deny, first.Warn)
	}
	for range 5 {
		again, err := e.Eval(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again.Deny, first.Deny) || !slices.Equal(again.Warn, first.Warn) {
			t.Fatalf("nondeterministic result:\n%q\n%q", first, again)
		}
	}
}

// typedConfig stands in for the server's typed config: a struct, not a map,
// whose nil slices marshal as null.
type typedConfig struct {
	Service   map[string]any `json:"service"`
	Server    map[string]any `json:"server"`
	Tenancy   map[string]any `json:"tenancy"`
	Admission map[string]any `json:"admission"`
	Jobs      map[string]any `json:"jobs"`
	Database  struct {
		Control map[string]any `json:"control"`
		Shards  []typedShard   `json:"shards"`
	} `json:"database"`
	Cells  []map[string]any `json:"cells"`
	Routes []map[string]any `json:"routes"`
}

type typedShard struct {
	Name     string   `json:"name"`
	DSNEnv   string   `json:"dsn_env"`
	Slots    []string `json:"slots"`
	MaxConns int      `json:"max_conns"`
}

func TestEvalStructInputWithNullSlots(t *testing.T) {
	e := newEvaluator(t)
	m := loadConfig(t, "testdata/default.json")
	var tc typedConfig
	tc.Service, tc.Server, tc.Tenancy = obj(m, "service"), obj(m, "server"), obj(m, "tenancy")
	tc.Admission, tc.Jobs = obj(m, "admission"), obj(m, "jobs")
	tc.Database.Control = obj(m, "database", "control")
	tc.Database.Shards = []typedShard{
		{Name: "shard-0", DSNEnv: "CELLGATE_SHARD_0_DSN", MaxConns: 10}, // Slots nil → null
		{Name: "shard-1", DSNEnv: "CELLGATE_SHARD_1_DSN", MaxConns: 10},
	}
	tc.Cells = []map[string]any{{"name": "cell-1", "url": "http://127.0.0.1:8080", "slots": nil}}
	for _, r := range m["routes"].([]any) {
		tc.Routes = append(tc.Routes, r.(map[string]any))
	}
	r, err := e.Eval(context.Background(), tc)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deny) != 0 || len(r.Warn) != 0 {
		t.Fatalf("typed default config: deny %q, warn %q", r.Deny, r.Warn)
	}

	tc.Database.Shards[1].Slots = []string{"0-16383"}
	r, err = e.Eval(context.Background(), &tc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"database.shards[0] (shard-0): no slots while other shards list theirs; give every shard slots, or none so they split evenly"}
	if !slices.Equal(r.Deny, want) {
		t.Fatalf("deny = %q, want %q", r.Deny, want)
	}
}

func TestEvalRejectsNonObjectInput(t *testing.T) {
	e := newEvaluator(t)
	for _, in := range []any{nil, "config", []any{1}, 42} {
		if _, err := e.Eval(context.Background(), in); err == nil {
			t.Errorf("Eval(%#v) = nil error, want one", in)
		}
	}
	if _, err := e.Eval(context.Background(), map[string]any{"bad": func() {}}); err == nil {
		t.Error("Eval(unmarshalable) = nil error, want one")
	}
}

func TestEvalHonoursCancelledContext(t *testing.T) {
	e := newEvaluator(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Eval(ctx, manyRanges(t, 1024)); err == nil {
		t.Fatal("Eval with a cancelled context = nil error, want one")
	}
}

func TestEvalConcurrent(t *testing.T) {
	e := newEvaluator(t)
	good := loadConfig(t, "testdata/default.json")
	bad := edit(t, func(cfg map[string]any) { obj(cfg, "jobs")["backend"] = "local" })
	rounds := 10
	if raceEnabled {
		rounds = 3
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			for range rounds {
				in, wantDeny := good, 0
				if i%2 == 1 {
					in, wantDeny = bad, 1
				}
				r, err := e.Eval(context.Background(), in)
				if err != nil {
					errs <- err
					return
				}
				if len(r.Deny) != wantDeny {
					errs <- errors.New("wrong deny count: " + strings.Join(r.Deny, "; "))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEmbedsEveryRuleFile guards the explicit go:embed list: a rule file
// added to the directory but not embedded would be tested by TestRego yet
// missing from the binary.
func TestEmbedsEveryRuleFile(t *testing.T) {
	var onDisk, embedded []string
	for _, g := range ruleGlobs {
		d, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		onDisk = append(onDisk, d...)
		e, err := fs.Glob(files, g)
		if err != nil {
			t.Fatal(err)
		}
		embedded = append(embedded, e...)
	}
	onDisk = slices.DeleteFunc(onDisk, func(n string) bool { return strings.HasSuffix(n, "_test.rego") })
	embedded = slices.DeleteFunc(embedded, func(n string) bool { return strings.HasSuffix(n, "_test.rego") })
	slices.Sort(onDisk)
	slices.Sort(embedded)
	if !slices.Equal(onDisk, embedded) {
		t.Fatalf("rule files on disk %q, embedded %q", onDisk, embedded)
	}
}

// TestEvenSplitBound holds the bound of the even split: 16,385 cells
// cannot split 16,384 slots (16,384 would: the Rego test of even_split
// checks the formula on 1,000). It lives in Go because building 16,385 cells in a Rego test takes
// longer than `opa test`'s default timeout.
func TestEvenSplitBound(t *testing.T) {
	e := newEvaluator(t)
	cellsOf := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{"name": fmt.Sprintf("c%d", i), "url": fmt.Sprintf("http://c%d", i), "slots": []any{}}
		}
		return out
	}
	for _, c := range []struct {
		n    int
		deny string
	}{{16385, "cells: 16385 cells cannot split 16384 slots; each needs at least one"}} {
		cfg := loadConfig(t, "testdata/default.json")
		cfg["cells"] = cellsOf(c.n)
		r, err := e.Eval(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var cellDenies []string
		for _, d := range r.Deny {
			if strings.HasPrefix(d, "cells") {
				cellDenies = append(cellDenies, d)
			}
		}
		switch {
		case c.deny == "" && len(cellDenies) > 0:
			t.Errorf("%d cells: denied %q", c.n, cellDenies)
		case c.deny != "" && (len(cellDenies) != 1 || cellDenies[0] != c.deny):
			t.Errorf("%d cells: deny %q, want %q", c.n, cellDenies, c.deny)
		}
	}
}
