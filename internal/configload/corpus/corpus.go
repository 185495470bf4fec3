// Package corpus reads the shared corpus of per-cell config files
// (tests/testdata/corpus): configload's tests run it through Load
// in-process, tests/ through the real binaries. One reader, so both read
// the .want format the same way.
//
// A case is a per-cell JSON file under valid/ or invalid/. An invalid
// case's .want file holds the spec path every refusal must name, then
// optionally "generate: accepts" (a spec the generator accepts but no
// process may run as is) and "generate: not <path>" lines (an issue only a
// process reports: a rule of mode Final), then one "errors:" line per
// issue of the refusal, in order: "errors: <path> <line>" for a value the
// file writes at that line, "errors: <path> default <line>" for a default
// placed at its nearest written ancestor, "errors: <path> default" when
// none is written.
package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// UpdateEnv names the variable that, set to 1, has configload's in-process
// test rewrite the errors lines from what Load says (review the diff).
const UpdateEnv = "CELLGATE_UPDATE_CORPUS"

// Case is one corpus file and what it must give.
type Case struct {
	// Name is "valid/<base>" or "invalid/<base>".
	Name string
	// File is the JSON file's path as found under the corpus directory.
	File string
	// Want is the .want file's path ("" for a valid case).
	Want  string
	Valid bool
	// Path is the spec path every refusal must name.
	Path string
	// GenAccepts: the generator accepts the spec (a rule only a process
	// applies).
	GenAccepts bool
	// GenNot are the paths of issues only a process reports.
	GenNot []string
	// Errors are every issue of the refusal as "path where" (Where), in
	// order.
	Errors []string
}

// Read returns every case under dir (valid/ then invalid/). A malformed
// .want file fails tb, as does an invalid case without errors lines
// unless UpdateEnv is set (the lines are being written).
func Read(tb testing.TB, dir string) []Case {
	tb.Helper()
	update := os.Getenv(UpdateEnv) == "1"
	var out []Case
	for _, kind := range []string{"valid", "invalid"} {
		files, err := filepath.Glob(filepath.Join(dir, kind, "*.json"))
		if err != nil || len(files) == 0 {
			tb.Fatalf("corpus %s: %v (%d files)", kind, err, len(files))
		}
		for _, f := range files {
			c := Case{Name: kind + "/" + strings.TrimSuffix(filepath.Base(f), ".json"), File: f, Valid: kind == "valid"}
			if !c.Valid {
				c.Want = strings.TrimSuffix(f, ".json") + ".want"
				raw, err := os.ReadFile(c.Want)
				if err != nil {
					tb.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
				c.Path = lines[0]
				for _, l := range lines[1:] {
					if p, ok := strings.CutPrefix(l, "generate: not "); ok {
						c.GenNot = append(c.GenNot, p)
						continue
					}
					e, ok := strings.CutPrefix(l, "errors: ")
					switch {
					case l == "generate: accepts":
						c.GenAccepts = true
					case ok && wellFormed(e):
						c.Errors = append(c.Errors, e)
					default:
						tb.Fatalf("%s: malformed line %q", c.Want, l)
					}
				}
				if len(c.Errors) == 0 && !update {
					tb.Fatalf("%s: no errors: lines", c.Want)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// WantText is the text of c's .want file with errors as its errors lines
// (what the update mode writes).
func (c Case) WantText(errors []string) string {
	lines := []string{c.Path}
	if c.GenAccepts {
		lines = append(lines, "generate: accepts")
	}
	for _, p := range c.GenNot {
		lines = append(lines, "generate: not "+p)
	}
	for _, e := range errors {
		lines = append(lines, "errors: "+e)
	}
	return strings.Join(lines, "\n") + "\n"
}

// Where renders an issue as an errors line does: its path, then its line,
// "default <line>" for a default placed at its nearest written ancestor
// (line > 0) or "default".
func Where(path string, line int, def bool) string {
	switch {
	case def && line > 0:
		return fmt.Sprintf("%s default %d", path, line)
	case def:
		return path + " default"
	}
	return fmt.Sprintf("%s %d", path, line)
}

// wellFormed checks an errors line: a path, then a line number,
// "default <line>" or "default".
func wellFormed(e string) bool {
	f := strings.Fields(e)
	num := func(s string) bool { n, err := strconv.Atoi(s); return err == nil && n > 0 }
	switch len(f) {
	case 2:
		return num(f[1]) || f[1] == "default"
	case 3:
		return f[1] == "default" && num(f[2])
	}
	return false
}
