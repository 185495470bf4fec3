// Command plan compares the spec at a base revision with the spec in the
// working tree and prints, per cell, the effective-config difference and
// the operator actions it implies: slot ranges that change owner (cell or
// shard) with the slotmove command, lane changes with the share of tenants
// that get new lanes, DSN variables that appear or vanish, and caps that
// are lowered. It exits 0 when no action is needed, 2 when one is (a CI
// gate), 1 on error.
//
//	go run ./cmd/plan [-base REV] [-spec schema]      (make plan BASE=REV)
//
// The base defaults to the merge base of HEAD and main. Plan only reads
// (git show, the CUE spec); it is safe to run anywhere.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload"
	"github.com/cellgate/cellgate/schema/specload"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "base git revision (default: git merge-base HEAD main)")
	specDir := fs.String("spec", "schema", "directory of the CUE spec in the working tree")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage is printed
		}
		return 1
	}
	if *base == "" {
		out, err := exec.Command("git", "merge-base", "HEAD", "main").Output()
		if err != nil {
			fmt.Fprintln(stderr, "plan: git merge-base HEAD main:", err)
			return 1
		}
		*base = strings.TrimSpace(string(out))
	}
	old, err := specAt(*base, *specDir)
	if err != nil {
		fmt.Fprintln(stderr, "plan: base:", err)
		return 1
	}
	cur, err := load(*specDir)
	if err != nil {
		fmt.Fprintln(stderr, "plan: working tree:", err)
		return 1
	}
	p, err := Compare(old, cur)
	if err != nil {
		fmt.Fprintln(stderr, "plan:", err)
		return 1
	}
	fmt.Fprintf(stdout, "plan: %s → working tree\n", short(*base))
	p.Print(stdout)
	if len(p.Actions) > 0 {
		return 2
	}
	return 0
}

func short(rev string) string { return rev[:min(len(rev), 12)] }

// specAt writes the spec's .cue files at rev into a temporary directory
// and loads them.
func specAt(rev, dir string) (config.Config, error) {
	out, err := exec.Command("git", "ls-tree", "--name-only", rev, dir+"/").Output()
	if err != nil {
		return config.Config{}, fmt.Errorf("git ls-tree %s %s: %w", rev, dir, err)
	}
	tmp, err := os.MkdirTemp("", "cellgate-plan-")
	if err != nil {
		return config.Config{}, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasSuffix(f, ".cue") {
			continue
		}
		src, err := exec.Command("git", "show", rev+":"+f).Output()
		if err != nil {
			return config.Config{}, fmt.Errorf("git show %s:%s: %w", rev, f, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(f)), src, 0o644); err != nil {
			return config.Config{}, err
		}
	}
	return load(tmp)
}

// load reads a spec through the generator's validation path.
func load(dir string) (config.Config, error) {
	sp, err := specload.LoadSpec(dir)
	if err != nil {
		return config.Config{}, err
	}
	cfg, _, _, err := configload.ValidateSpec(context.Background(), sp, configload.Spec)
	return cfg, err
}
