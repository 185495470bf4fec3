package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/schema"
)

// corpusCase is one per-cell file of tests/testdata/corpus and what the
// three entry points must say about it.
type corpusCase struct {
	name, file string
	valid      bool
	path       string // the spec path every refusal names
	genAccepts bool   // a spec the generator accepts but no process may run as is
}

func readCorpus(t *testing.T) []corpusCase {
	t.Helper()
	var out []corpusCase
	for _, kind := range []string{"valid", "invalid"} {
		files, err := filepath.Glob(filepath.Join("testdata", "corpus", kind, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("corpus %s: %v (%d files)", kind, err, len(files))
		}
		for _, f := range files {
			c := corpusCase{name: kind + "/" + strings.TrimSuffix(filepath.Base(f), ".json"), file: f, valid: kind == "valid"}
			if !c.valid {
				want, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".want")
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSpace(string(want)), "\n")
				c.path = lines[0]
				c.genAccepts = len(lines) > 1 && lines[1] == "generate: accepts"
			}
			out = append(out, c)
		}
	}
	return out
}

// TestConfigCorpusVerdicts runs every corpus file through the three entry
// points as a user would: `generate` on the spec the file amounts to (the
// example spec's config with the file merged over it, written as CUE),
// `server check -config file` and a real `server serve -config file`
// pointed at an unreachable database. All three must agree on the verdict,
// and each refusal must name the case's spec path. A valid case's serve
// must get past config validation ("config accepted") before it is killed
// or fails for its environment. Binaries are built once; cases run in
// parallel.
func TestConfigCorpusVerdicts(t *testing.T) {
	cases := readCorpus(t)
	dir := filepath.Dir(serverBin)
	genBin := filepath.Join(dir, "generate")
	if out, err := exec.Command("go", "build", "-o", genBin, "../cmd/generate").CombinedOutput(); err != nil {
		t.Fatalf("build cmd/generate: %v\n%s", err, out)
	}
	sem := make(chan struct{}, max(2, runtime.NumCPU()))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sem <- struct{}{}
			defer func() { <-sem }()
			checkOut, checkErr := exec.Command(serverBin, "check", "-config", c.file).CombinedOutput()
			genOut, genErr := runGenerate(t, genBin, c.file)
			serveOut, accepted := runServe(t, c.file)
			if c.valid {
				if checkErr != nil {
					t.Errorf("server check refused a valid case:\n%s", checkOut)
				}
				if genErr != nil {
					t.Errorf("generate refused a valid case:\n%s", genOut)
				}
				if !accepted {
					t.Errorf("serve did not get past config validation:\n%s", serveOut)
				}
				return
			}
			if checkErr == nil {
				t.Errorf("server check accepted an invalid case (want %s)", c.path)
			} else if !names(string(checkOut), c.path) {
				t.Errorf("server check does not name %s:\n%s", c.path, checkOut)
			}
			if accepted {
				t.Errorf("serve accepted an invalid case (want %s):\n%s", c.path, serveOut)
			} else if !names(serveOut, c.path) {
				t.Errorf("serve does not name %s:\n%s", c.path, serveOut)
			}
			switch {
			case c.genAccepts && genErr != nil:
				t.Errorf("generate refused a spec it must accept:\n%s", genOut)
			case !c.genAccepts && genErr == nil:
				t.Errorf("generate accepted an invalid case (want %s)", c.path)
			case !c.genAccepts && !names(string(genOut), c.path):
				t.Errorf("generate does not name %s:\n%s", c.path, genOut)
			}
		})
	}
}

// names reports whether out holds a message about path: the path followed
// by ": ", " (" or " at the end of a line.
func names(out, path string) bool {
	out = strings.ReplaceAll(out, `\n`, "\n")
	out = strings.ReplaceAll(out, `\"`, `"`)
	for _, sep := range []string{": ", " (", "\n"} {
		if strings.Contains(out, path+sep) {
			return true
		}
	}
	return false
}

// runGenerate writes the spec a per-cell file amounts to (the example
// config with the file merged over it, lists replacing lists) and runs the
// generator on it without sqlc.
func runGenerate(t *testing.T, genBin, file string) ([]byte, error) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var over map[string]any
	full := []byte(nil)
	if json.Unmarshal(raw, &over) == nil {
		full, err = config.Merge([]byte(spec.JSON), raw)
	}
	if full == nil || err != nil {
		full = raw // not an object: let the generator say so
	}
	dir := t.TempDir()
	app := "package cellgate\n\nconfig: #Config & " + string(config.Indent(full)) + "\n"
	for name, src := range map[string]string{"cellgate.cue": schema.Definitions, "app.cue": app} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return exec.Command(genBin, "-spec", dir, "-out", t.TempDir(), "-sqlc=false").CombinedOutput()
}

// runServe starts `server serve` with the file and databases that cannot
// answer, and reports its output and whether it logged "config accepted".
// It waits for the process to exit (a refusal) or for that line, then
// kills it.
func runServe(t *testing.T, file string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, serverBin, "serve", "-config", file)
	unreachable := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	cmd.Env = append(os.Environ(), "CELLGATE_ADDRESS=127.0.0.1:0", "CELLGATE_CONTROL_DSN="+unreachable,
		"CELLGATE_SHARD_0_DSN="+unreachable, "CELLGATE_SHARD_1_DSN="+unreachable)
	var buf bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	accepted := false
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		buf.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `"msg":"config accepted"`) {
			accepted = true
			_ = cmd.Process.Kill()
			break
		}
	}
	pr.Close()
	_ = cmd.Wait()
	return buf.String(), accepted
}
