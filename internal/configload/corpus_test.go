package configload

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/configload/corpus"
)

// corpusDir holds the shared corpus of per-cell files: tests/ runs it
// through the real binaries, this test through Load in-process (fast).
const corpusDir = "../../tests/testdata/corpus"

// TestCorpusInProcess: every corpus file gives its verdict through Load,
// and a refusal names the expected path and exactly the issues its .want
// lists, in order, each at its line. CELLGATE_UPDATE_CORPUS=1 rewrites the
// errors lines from what Load says (review the diff).
func TestCorpusInProcess(t *testing.T) {
	update := os.Getenv(corpus.UpdateEnv) == "1"
	for _, c := range corpus.Read(t, corpusDir) {
		t.Run(c.Name, func(t *testing.T) {
			_, err := Load(context.Background(), spec.Config(), c.File, nil, discard())
			if c.Valid {
				if err != nil {
					t.Fatalf("valid case refused: %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("invalid case not refused with an *Error; want a refusal naming %s: %v", c.Path, err)
			}
			if !slices.Contains(ce.Paths(), c.Path) {
				t.Fatalf("refusal does not name %s:\n%v", c.Path, err)
			}
			var got []string
			for _, is := range ce.Issues {
				if is.File != "" && is.File != c.File {
					t.Errorf("issue placed in %s, not the case's file: %s", is.File, is)
				}
				got = append(got, corpus.Where(is.Path, is.Line, is.Default))
			}
			if update {
				if err := os.WriteFile(c.Want, []byte(c.WantText(got)), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !slices.Equal(got, c.Errors) {
				t.Fatalf("issues\n  %s\nwant\n  %s\n%v", strings.Join(got, "\n  "), strings.Join(c.Errors, "\n  "), err)
			}
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
