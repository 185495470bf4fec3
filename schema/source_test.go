package schema

import (
	"slices"
	"testing"
)

// TestJSONSource: every value of a JSON document is indexed by spec path
// at its line and column (objects and lists at their opening bracket);
// a path not written locates its nearest written ancestor.
func TestJSONSource(t *testing.T) {
	src := JSONSource("cell.json", []byte(`{
  "server": {"address": "8080", "shutdown_timeout": "30 s"},
  "jobs": {"kinds": [
    {"name": "a", "args": [{"name": "x"}]}
  ]}
}`))
	for _, c := range []struct {
		path         string
		line, col    int
		exact, found bool
	}{
		{"server.address", 2, 25, true, true},
		{"server.shutdown_timeout", 2, 53, true, true},
		{"server", 2, 13, true, true},
		{"jobs.kinds[0].args[0].name", 4, 37, true, true},
		{"jobs.kinds[0]", 4, 5, true, true},
		{"jobs.kinds[0].timeout", 4, 5, false, true},
		{"server.cell", 2, 13, false, true},
		{"tenancy.source", 0, 0, false, false},
	} {
		line, col, exact, ok := src.Locate(c.path)
		if line != c.line || col != c.col || exact != c.exact || ok != c.found {
			t.Errorf("%s: %d:%d exact %v ok %v; want %d:%d exact %v ok %v", c.path, line, col, exact, ok, c.line, c.col, c.exact, c.found)
		}
	}
	is := []Issue{{Path: "server.address"}, {Path: "server.cell"}, {Path: "tenancy.source"}}
	src.Place(is)
	want := []string{"server.address: x (cell.json:2:25)", "server.cell: x (default, in cell.json:2:13)", "tenancy.source: x (default)"}
	for i := range is {
		is[i].Msg = "x"
		if got := is[i].String(); got != want[i] {
			t.Errorf("issue %d: %q, want %q", i, got, want[i])
		}
	}
	var none *Source
	none.Place(is) // a nil Source places nothing and does not panic
}

// TestPaths: the spec path helpers.
func TestPaths(t *testing.T) {
	if got := SplitPath("jobs.kinds[1].args[2].type"); !slices.Equal(got, []string{"jobs", "kinds", "1", "args", "2", "type"}) {
		t.Errorf("SplitPath: %q", got)
	}
	for _, c := range [][2]string{{"a.b[2].c", "a.b[2]"}, {"a.b[2]", "a.b"}, {"a.b", "a"}, {"a", ""}} {
		if got := ParentPath(c[0]); got != c[1] {
			t.Errorf("ParentPath(%q) = %q, want %q", c[0], got, c[1])
		}
	}
	for _, c := range []struct {
		p, base string
		want    bool
	}{{"a.b", "a", true}, {"a[0]", "a", true}, {"a", "a", true}, {"ab", "a", false}, {"a", "a.b", false}} {
		if got := Within(c.p, c.base); got != c.want {
			t.Errorf("Within(%q, %q) = %v", c.p, c.base, got)
		}
	}
}

// TestIssueOneLine: a value CUE prints over several lines (an object where
// a list belongs) is named in one line, so a report has one issue a line.
func TestIssueOneLine(t *testing.T) {
	out, err := Unify([]byte(`{"database": {"shards": {"name": "x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Issues) != 1 || out.Issues[0].Path != "database.shards" || out.Issues[0].Msg != "must be a list; got an object" {
		t.Fatalf("issues %+v", out.Issues)
	}
}
