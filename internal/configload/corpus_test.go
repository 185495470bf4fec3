package configload

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
)

// corpusDir holds the shared corpus of per-cell files: tests/ runs it
// through the real binaries, this test through Load in-process (fast).
const corpusDir = "../../tests/testdata/corpus"

// CorpusCase is one corpus file and what it must give.
type corpusCase struct {
	name, file string
	valid      bool
	path       string // the spec path the refusal must name
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
				want, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".want")
				if err != nil {
					tb.Fatal(err)
				}
				c.path, _, _ = strings.Cut(string(want), "\n")
			}
			out = append(out, c)
		}
	}
	return out
}

// TestCorpusInProcess: every corpus file gives its verdict through Load,
// and a refusal names the expected path (as an issue path or a file error).
func TestCorpusInProcess(t *testing.T) {
	for _, c := range readCorpus(t) {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(context.Background(), spec.Config(), c.file, nil, discard())
			if c.valid {
				if err != nil {
					t.Fatalf("valid case refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid case accepted; want a refusal naming %s", c.path)
			}
			if !namesPath(err, c.path) {
				t.Fatalf("refusal does not name %s:\n%v", c.path, err)
			}
		})
	}
}

// namesPath reports whether err names path as one of its issue paths.
func namesPath(err error, path string) bool {
	var ce *Error
	if errors.As(err, &ce) {
		for _, p := range ce.Paths() {
			if p == path {
				return true
			}
		}
		return false
	}
	var fe *config.FileError
	if errors.As(err, &fe) {
		for _, e := range fe.Errs {
			if e.Path == path {
				return true
			}
		}
	}
	return false
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
