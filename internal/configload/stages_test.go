package configload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload/corpus"
	"github.com/cellgate/cellgate/schema"
	"github.com/cellgate/cellgate/schema/specload"
)

// writeFile writes a per-cell file into a fresh directory and returns its
// path.
func writeFile(tb testing.TB, src string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "cell.json")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

func refusal(tb testing.TB, err error) *Error {
	tb.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		tb.Fatalf("want an *Error, got %v", err)
	}
	return ce
}

// TestAllStagesAtOnce: one file with a bad field for every stage (Go shape,
// CUE range and enum, a start-up rule, a generated name, the policy) gets
// every problem in one report, ordered by line, each at the user's
// file:line:col.
func TestAllStagesAtOnce(t *testing.T) {
	path := writeFile(t, `{
  "server": {"address": "8080", "shutdown_timeout": "30 s"},
  "jobs": {"workers": 0, "tenants": {"lanes": 8, "lanes_per_tenant": 9},
    "kinds": [{"name": "ping", "args": [{"name": "unique_key", "type": "string"}]}]},
  "tenancy": {"source": "cookie"}
}
`)
	_, err := Load(context.Background(), spec.Config(), path, nil, discard())
	ce := refusal(t, err)
	want := strings.Join([]string{
		`server.address: "8080" is not a listen address; write ":8080" or "127.0.0.1:8080" (` + path + `:2:25)`,
		`server.shutdown_timeout: "30 s" is not a duration; write e.g. "30s" (` + path + `:2:53)`,
		`jobs.workers: must be ≥ 1; got 0 (` + path + `:3:23)`,
	}, "\n")
	got := schema.FormatIssues(ce.Issues)
	if !strings.HasPrefix(got, want+"\n") {
		t.Fatalf("report starts\n%s\nwant\n%s", got, want)
	}
	// The later stages: the lanes rule (policy), the reserved arg name
	// (names), the enum (CUE), each at its own line, in line order. The
	// policy's "8 lanes but only 4 workers" judges the default standing in
	// for the refused jobs.workers: a follow-on, not reported.
	var order []string
	for _, is := range ce.Issues {
		order = append(order, fmt.Sprintf("%s@%d", is.Path, is.Line))
	}
	wantOrder := []string{"server.address@2", "server.shutdown_timeout@2", "jobs.workers@3",
		"jobs.tenants.lanes_per_tenant@3", "jobs.kinds[0].args[0].name@4", "tenancy.source@5"}
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Fatalf("issues %q\nwant %q\n%s", order, wantOrder, got)
	}
}

// TestFollowOnDropped: a field refused by an early stage is removed and its
// default stands in; what a later stage says at, inside or around it is
// not reported again, and the later stages still run on the rest.
func TestFollowOnDropped(t *testing.T) {
	// The slot spec fails CUE; without the removal the policy would also
	// name the gap it leaves in the shard map (database.shards).
	path := writeFile(t, `{"database": {"shards": [
 {"name": "shard-0", "dsn_env": "CELLGATE_SHARD_0_DSN", "slots": ["0-08191"]},
 {"name": "shard-1", "dsn_env": "CELLGATE_SHARD_1_DSN", "slots": ["8192-16383"]}]},
 "jobs": {"workers": 4, "tenants": {"lanes": 8, "lanes_per_tenant": 2}}}`)
	_, err := Load(context.Background(), spec.Config(), path, nil, discard())
	ce := refusal(t, err)
	got := strings.Join(ce.Paths(), " ")
	if got != "database.shards[0].slots[0] jobs.tenants.lanes" {
		t.Fatalf("paths %q, want the slot spec and the lanes rule only:\n%s", got, schema.FormatIssues(ce.Issues))
	}
}

// TestDefaultPosition: a field the user did not write is named as a
// default, at its nearest written ancestor, or bare when none is written.
func TestDefaultPosition(t *testing.T) {
	path := writeFile(t, `{
  "cells": [
    {"name": "cell-1", "url": "http://a:1", "slots": ["0-8191"]},
    {"name": "cell-2", "url": "http://b:1", "slots": ["8192-16383"]}
  ]
}`)
	_, err := Load(context.Background(), spec.Config(), path, nil, discard())
	ce := refusal(t, err)
	if len(ce.Issues) != 1 {
		t.Fatalf("want one issue:\n%s", schema.FormatIssues(ce.Issues))
	}
	if got := ce.Issues[0].String(); !strings.HasSuffix(got, " (default)") || !strings.HasPrefix(got, "server.cell: ") {
		t.Fatalf("server.cell is a default nobody wrote: %s", got)
	}

	// The user wrote server but not server.cell: the default is placed
	// at the nearest written ancestor.
	path = writeFile(t, `{
  "cells": [
    {"name": "cell-1", "url": "http://a:1", "slots": ["0-8191"]},
    {"name": "cell-2", "url": "http://b:1", "slots": ["8192-16383"]}
  ],
  "server": {"address": ":8081"}
}`)
	_, err = Load(context.Background(), spec.Config(), path, nil, discard())
	ce = refusal(t, err)
	got := schema.FormatIssues(ce.Issues)
	if !strings.HasPrefix(got, "server.cell: ") || !strings.HasSuffix(got, " (default, in "+path+":6:13)") {
		t.Fatalf("want server.cell as a default in %s:6:13:\n%s", path, got)
	}
}

// TestIssueCap: a report lists at most schema.MaxIssues problems and
// counts the rest; every issue stays in the error.
func TestIssueCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("{\"jobs\": {\"kinds\": [\n")
	for i := range 55 {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `  {"name": "k%d", "timeout": "%d s"}`, i, i)
	}
	b.WriteString("\n]}}\n")
	path := writeFile(t, b.String())
	_, err := Load(context.Background(), spec.Config(), path, nil, discard())
	ce := refusal(t, err)
	if len(ce.Issues) != 55 {
		t.Fatalf("want 55 issues, got %d:\n%s", len(ce.Issues), schema.FormatIssues(ce.Issues))
	}
	lines := strings.Split(ce.Error(), "\n")
	if n := len(lines); n != 1+schema.MaxIssues+1 {
		t.Fatalf("report has %d lines, want a header, %d issues and a count", n, schema.MaxIssues)
	}
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "… and 5 more errors" {
		t.Fatalf("last line %q", last)
	}
	for i, is := range ce.Issues {
		if is.Line != i+2 {
			t.Fatalf("issue %d at line %d, want %d (sorted by line)", i, is.Line, i+2)
		}
	}
}

// writeSpec writes a CUE spec directory: the definitions and app.cue.
func writeSpec(tb testing.TB, app string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, src := range map[string]string{"cellgate.cue": schema.Definitions, "app.cue": app} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// validateSpecDir is the generator's two calls: load the spec in dir, then
// ValidateSpec.
func validateSpecDir(dir string, mode Mode) (config.Config, []byte, []string, error) {
	sp, err := specload.LoadSpec(dir)
	if err != nil {
		return config.Config{}, nil, nil, err
	}
	return ValidateSpec(context.Background(), sp, mode)
}

// TestValidateSpecKeepsErrorsOutsideConfig: a CUE error outside the spec's
// config block is reported with the config's own problems from the later
// stages, not lost when they refuse too.
func TestValidateSpecKeepsErrorsOutsideConfig(t *testing.T) {
	dir := writeSpec(t, `package cellgate

extra: int & "x"

config: #Config & {
	service: name: "s"
	server: address: "8080"
	jobs: workers: 0
}
`)
	_, _, _, err := validateSpecDir(dir, Spec)
	ce := refusal(t, err)
	got := schema.FormatIssues(ce.Issues)
	for _, want := range []string{"extra: ", "app.cue:3:", "server.address: ", "app.cue:7:19)", "jobs.workers: must be ≥ 1; got 0", "app.cue:8:17)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if ce.Issues[0].Path != "extra" {
		t.Errorf("issues are not in line order:\n%s", got)
	}
}

// TestValidateSpecPositions: every stage's problem in a spec names its
// line in app.cue, the file the user wrote.
func TestValidateSpecPositions(t *testing.T) {
	dir := writeSpec(t, `package cellgate

config: #Config & {
	service: name: "s"
	tenancy: source: "cookie"
	jobs: {
		workers: 2
		tenants: {lanes: 4, lanes_per_tenant: 1}
	}
}
`)
	_, _, _, err := validateSpecDir(dir, Spec)
	ce := refusal(t, err)
	var got []string
	for _, is := range ce.Issues {
		got = append(got, fmt.Sprintf("%s %s:%d", is.Path, filepath.Base(is.File), is.Line))
	}
	want := "tenancy.source app.cue:5 jobs.tenants.lanes app.cue:8"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q, want %q\n%s", got, want, schema.FormatIssues(ce.Issues))
	}
}

// TestExportPlacesInUserFile: `server export` completes the merged config;
// a CUE problem is placed in the user's file, not at a line of the merged
// document.
func TestExportPlacesInUserFile(t *testing.T) {
	path := writeFile(t, "{\n  \"jobs\": {\"workers\": 0}\n}\n")
	_, err := Export(spec.Config(), path)
	ce := refusal(t, err)
	if got := schema.FormatIssues(ce.Issues); got != "jobs.workers: must be ≥ 1; got 0 ("+path+":2:23)" {
		t.Fatalf("got %s", got)
	}
	full, err := Export(spec.Config(), writeFile(t, `{"jobs": {"workers": 3}}`))
	if err != nil || !strings.Contains(string(full), `"workers": 3`) {
		t.Fatalf("export of a valid file: %v\n%s", err, full)
	}
}

// TestExportShapeAsLoad: `server export` refuses a file's unknown field,
// mistyped value and out-of-range value as Load does: every one at once,
// an *Error placed in the user's file.
func TestExportShapeAsLoad(t *testing.T) {
	path := writeFile(t, "{\n  \"jobs\": {\"workerz\": 2},\n  \"server\": {\"address\": 8080},\n  \"tenancy\": {\"source\": \"cookie\"}\n}\n")
	_, err := Export(spec.Config(), path)
	got := schema.FormatIssues(refusal(t, err).Issues)
	_, lerr := Load(context.Background(), spec.Config(), path, nil, discard())
	if want := schema.FormatIssues(refusal(t, lerr).Issues); got != want {
		t.Fatalf("export says\n%s\nload says\n%s", got, want)
	}
	for _, w := range []string{"jobs.workerz", "server.address", "tenancy.source", path + ":2:"} {
		if !strings.Contains(got, w) {
			t.Fatalf("report does not name %s:\n%s", w, got)
		}
	}
}

// TestValidateConcurrent: validations on many goroutines at once (the
// server's checks, parallel tests, the fuzzer's workers) share the pooled
// CUE contexts and the guarded definitions; under -race this fails when a
// cue.Context is used by two goroutines.
func TestValidateConcurrent(t *testing.T) {
	cases := corpus.Read(t, corpusDir)
	done := make(chan error)
	for g := range 8 {
		go func() {
			var err error
			for i := g; i < len(cases); i += 8 {
				c := cases[i]
				_, lerr := Load(context.Background(), spec.Config(), c.File, nil, discard())
				if (lerr == nil) != c.Valid {
					err = fmt.Errorf("%s: verdict %v", c.Name, lerr)
					break
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestSameStageNotFollowOn: two problems one stage finds in one list are
// both reported; removing the list for the first does not make the second
// a follow-on.
func TestSameStageNotFollowOn(t *testing.T) {
	path := writeFile(t, `{"tenancy": {"public_paths": [1, "/ok", 2]}}`)
	_, err := Load(context.Background(), spec.Config(), path, nil, discard())
	ce := refusal(t, err)
	if got := strings.Join(ce.Paths(), " "); got != "tenancy.public_paths[0] tenancy.public_paths[2]" {
		t.Fatalf("paths %q:\n%s", got, schema.FormatIssues(ce.Issues))
	}
}
