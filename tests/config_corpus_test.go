package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload/corpus"
	"github.com/cellgate/cellgate/schema"
)

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
	cases := corpus.Read(t, filepath.Join("testdata", "corpus"))
	dir := filepath.Dir(serverBin)
	genBin := filepath.Join(dir, "generate")
	if out, err := exec.Command("go", "build", "-o", genBin, "../cmd/generate").CombinedOutput(); err != nil {
		t.Fatalf("build cmd/generate: %v\n%s", err, out)
	}
	sem := make(chan struct{}, max(2, runtime.NumCPU()))
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			sem <- struct{}{}
			defer func() { <-sem }()
			checkOut, checkErr := exec.Command(serverBin, "check", "-config", c.File).CombinedOutput()
			genOut, genSpec, genErr := runGenerate(t, genBin, c.File)
			serveOut, accepted := runServe(t, c.File)
			if c.Valid {
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
				t.Errorf("server check accepted an invalid case (want %s)", c.Path)
			} else if !names(string(checkOut), c.Path) {
				t.Errorf("server check does not name %s:\n%s", c.Path, checkOut)
			} else {
				sameIssues(t, "server check", string(checkOut), c.File, c.Errors)
			}
			if accepted {
				t.Errorf("serve accepted an invalid case (want %s):\n%s", c.Path, serveOut)
			} else if !names(serveOut, c.Path) {
				t.Errorf("serve does not name %s:\n%s", c.Path, serveOut)
			} else {
				sameIssues(t, "serve", serveOut, c.File, c.Errors)
			}
			switch {
			case c.GenAccepts && genErr != nil:
				t.Errorf("generate refused a spec it must accept:\n%s", genOut)
			case !c.GenAccepts && genErr == nil:
				t.Errorf("generate accepted an invalid case (want %s)", c.Path)
			case !c.GenAccepts && !names(string(genOut), c.Path):
				t.Errorf("generate does not name %s:\n%s", c.Path, genOut)
			case !c.GenAccepts:
				sameSpecIssues(t, string(genOut), genSpec, c)
			}
		})
	}
}

// reportedIssue is one issue line of a refusal as printed.
type reportedIssue struct {
	path, file string
	line       int
	def        bool
}

// issueLine matches the position at the end of an issue line.
var issueLine = regexp.MustCompile(`^  (\S+?):? .*\((?:(default)(?:, in (\S+?):(\d+)(?::\d+)?)?|(\S+?):(\d+)(?::\d+)?)\)$`)

// reported reads the issue lines a refusal printed (the lines under "…
// is invalid:" or "… is refused:") and the count of issues not printed.
func reported(out string) ([]reportedIssue, int, bool) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasSuffix(l, " is invalid:") && !strings.HasSuffix(l, " is refused:") {
			continue
		}
		var is []reportedIssue
		more := 0
		for _, l := range lines[i+1:] {
			if !strings.HasPrefix(l, "  ") {
				break
			}
			if n, ok := strings.CutPrefix(l, "  … and "); ok {
				fmt.Sscanf(n, "%d", &more)
				break
			}
			m := issueLine.FindStringSubmatch(l)
			if m == nil {
				is = append(is, reportedIssue{path: "unplaced: " + l})
				continue
			}
			r := reportedIssue{path: m[1], def: m[2] != ""}
			if r.def {
				r.file = m[3]
				r.line, _ = strconv.Atoi(m[4])
			} else {
				r.file = m[5]
				r.line, _ = strconv.Atoi(m[6])
			}
			is = append(is, r)
		}
		return is, more, true
	}
	return nil, 0, false
}

func (r reportedIssue) String() string { return corpus.Where(r.path, r.line, r.def) }

// sameIssues checks a process's refusal against the case's errors: the
// same issues in the same order (up to the cap, the rest counted), each
// placed in the case's own file.
func sameIssues(t *testing.T, who, out, file string, want []string) {
	t.Helper()
	is, more, ok := reported(out)
	if !ok {
		t.Errorf("%s printed no list of issues:\n%s", who, out)
		return
	}
	var got []string
	for _, r := range is {
		if r.file != "" && r.file != file {
			t.Errorf("%s placed %s in %s, not %s", who, r.path, r.file, file)
		}
		got = append(got, r.String())
	}
	shown := want[:min(len(want), schema.MaxIssues)]
	if !slices.Equal(got, shown) || more != len(want)-len(shown) {
		t.Errorf("%s reported\n  %s\n  (and %d more)\nwant\n  %s\n  (and %d more)\n%s", who,
			strings.Join(got, "\n  "), more, strings.Join(shown, "\n  "), len(want)-len(shown), out)
	}
}

// sameSpecIssues checks generate's refusal: the case's issues (less those
// only a process reports), each at the line of its path in the spec the
// test wrote (read as JSON, not from the CUE syntax tree generate reads),
// in line order; with more than the cap, the ones printed are among them
// and the rest counted.
func sameSpecIssues(t *testing.T, out string, spec string, c corpus.Case) {
	t.Helper()
	is, more, ok := reported(out)
	if !ok {
		t.Errorf("generate printed no list of issues:\n%s", out)
		return
	}
	// The config the test wrote into app.cue is JSON: its lines are read
	// as a per-cell file's are, independently of generate's reading of the
	// CUE syntax tree.
	start := strings.Index(spec, "{")
	base := strings.Count(spec[:start], "\n")
	src := schema.JSONSource("app.cue", []byte(spec[start:]))
	var want []string
	for _, e := range c.Errors {
		path := strings.Fields(e)[0]
		if slices.Contains(c.GenNot, path) {
			continue
		}
		line, _, exact, ok := src.Locate(path)
		if ok {
			line += base
		}
		want = append(want, corpus.Where(path, line, !exact))
	}
	var got []string
	last := 0
	for _, r := range is {
		if r.file != "" && filepath.Base(r.file) != "app.cue" {
			t.Errorf("generate placed %s in %s, not the spec's app.cue", r.path, r.file)
		}
		if r.line < last && !r.def {
			t.Errorf("generate's issues are not in line order:\n%s", out)
		}
		last = max(last, r.line)
		got = append(got, r.String())
	}
	rest := slices.Clone(want)
	for _, g := range got {
		i := slices.Index(rest, g)
		if i < 0 {
			t.Errorf("generate reported %q, not among\n  %s\n%s", g, strings.Join(want, "\n  "), out)
			return
		}
		rest = slices.Delete(rest, i, i+1)
	}
	if len(rest) != more {
		t.Errorf("generate did not report\n  %s\n(it counted %d more)\n%s", strings.Join(rest, "\n  "), more, out)
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
func runGenerate(t *testing.T, genBin, file string) ([]byte, string, error) {
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
	files := map[string]string{"cellgate.cue": schema.Definitions, "app.cue": app, "types.cue": specTypes(t)}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(genBin, "-spec", dir, "-out", t.TempDir(), "-sqlc=false").CombinedOutput()
	return out, app, err
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

// specTypes is the example spec's schema/app.cue without its config
// block: the definitions its routes name (#SignUp, #Account...), which a
// per-cell file's routes name too.
func specTypes(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../schema/app.cue")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "\nconfig: ")
	end := strings.Index(s[max(start, 0):], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatal("schema/app.cue has no config: block ending in a line \"}\"")
	}
	return s[:start+1] + s[start+end+3:]
}
