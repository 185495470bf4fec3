package configload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
)

// corpusDir holds the shared corpus of per-cell files: tests/ runs it
// through the real binaries, this test through Load in-process (fast).
const corpusDir = "../../tests/testdata/corpus"

// corpusCase is one corpus file and what it must give. Its .want file
// holds the spec path the refusal must name, optionally "generate:
// accepts", "generate: not <path>" for an issue only a process reports
// (a rule of mode Final), then one "errors:" line per issue of the refusal, in order:
// "errors: <path> <line>" for a value the file writes at that line,
// "errors: <path> default <line>" for a default placed at the nearest
// written ancestor, "errors: <path> default" when none is written.
type corpusCase struct {
	name, file, want string
	valid            bool
	path             string   // the spec path the refusal must name
	genAccepts       bool     // generate accepts (a rule only a process applies)
	genNot           []string // "generate: not <path>": an issue only a process reports
	errors           []string // every issue as "path where", in order
}

func readCorpus(tb testing.TB) []corpusCase {
	tb.Helper()
	var out []corpusCase
	for _, kind := range []string{"valid", "invalid"} {
		files, err := filepath.Glob(filepath.Join(corpusDir, kind, "*.json"))
		if err != nil || len(files) == 0 {
			tb.Fatalf("corpus %s: %v (%d files)", kind, err, len(files))
		}
		for _, f := range files {
			c := corpusCase{name: kind + "/" + strings.TrimSuffix(filepath.Base(f), ".json"), file: f, valid: kind == "valid"}
			if !c.valid {
				c.want = strings.TrimSuffix(f, ".json") + ".want"
				raw, err := os.ReadFile(c.want)
				if err != nil {
					tb.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
				c.path = lines[0]
				for _, l := range lines[1:] {
					switch {
					case l == "generate: accepts":
						c.genAccepts = true
					case strings.HasPrefix(l, "generate: not "):
						c.genNot = append(c.genNot, l)
					case strings.HasPrefix(l, "errors: "):
						e := strings.TrimPrefix(l, "errors: ")
						if !wellFormed(e) {
							tb.Fatalf("%s: malformed line %q", c.want, l)
						}
						c.errors = append(c.errors, e)
					default:
						tb.Fatalf("%s: unknown line %q", c.want, l)
					}
				}
			}
			out = append(out, c)
		}
	}
	return out
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

// where renders an issue as an errors line would.
func where(path string, line int, def bool) string {
	switch {
	case def && line > 0:
		return fmt.Sprintf("%s default %d", path, line)
	case def:
		return path + " default"
	}
	return fmt.Sprintf("%s %d", path, line)
}

// TestCorpusInProcess: every corpus file gives its verdict through Load,
// and a refusal names the expected path and exactly the issues its .want
// lists, in order, each at its line. CELLGATE_UPDATE_CORPUS=1 rewrites the
// errors lines from what Load says (review the diff).
func TestCorpusInProcess(t *testing.T) {
	update := os.Getenv("CELLGATE_UPDATE_CORPUS") == "1"
	for _, c := range readCorpus(t) {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(context.Background(), spec.Config(), c.file, nil, discard())
			if c.valid {
				if err != nil {
					t.Fatalf("valid case refused: %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("invalid case not refused with an *Error; want a refusal naming %s: %v", c.path, err)
			}
			if !slices.Contains(ce.Paths(), c.path) {
				t.Fatalf("refusal does not name %s:\n%v", c.path, err)
			}
			var got []string
			for _, is := range ce.Issues {
				if is.File != "" && is.File != c.file {
					t.Errorf("issue placed in %s, not the case's file: %s", is.File, is)
				}
				got = append(got, where(is.Path, is.Line, is.Default))
			}
			if update {
				lines := []string{c.path}
				if c.genAccepts {
					lines = append(lines, "generate: accepts")
				}
				lines = append(lines, c.genNot...)
				for _, g := range got {
					lines = append(lines, "errors: "+g)
				}
				if err := os.WriteFile(c.want, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !slices.Equal(got, c.errors) {
				t.Fatalf("issues\n  %s\nwant\n  %s\n%v", strings.Join(got, "\n  "), strings.Join(c.errors, "\n  "), err)
			}
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
