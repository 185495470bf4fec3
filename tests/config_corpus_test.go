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
	"github.com/cellgate/cellgate/schema"
)

// corpusCase is one per-cell file of tests/testdata/corpus and what the
// three entry points must say about it. The .want format is configload's
// (internal/configload/corpus_test.go): the path every refusal names,
// optionally "generate: accepts", "generate: not <path>" for an issue only
// a process reports (the rules of mode Final), then one "errors:" line per
// issue in order: "<path> <line>", "<path> default <line>" or "<path>
// default".
type corpusCase struct {
	name, file string
	valid      bool
	path       string   // the spec path every refusal names
	genAccepts bool     // a spec the generator accepts but no process may run as is
	genNot     []string // paths generate does not report
	errors     []string // every issue of the refusal, in order
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
				for _, l := range lines[1:] {
					switch {
					case l == "generate: accepts":
						c.genAccepts = true
					case strings.HasPrefix(l, "generate: not "):
						c.genNot = append(c.genNot, strings.TrimPrefix(l, "generate: not "))
					case strings.HasPrefix(l, "errors: ") && wellFormed(strings.TrimPrefix(l, "errors: ")):
						c.errors = append(c.errors, strings.TrimPrefix(l, "errors: "))
					default:
						t.Fatalf("%s: malformed line %q", f, l)
					}
				}
				if len(c.errors) == 0 {
					t.Fatalf("%s: no errors: lines", f)
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
			genOut, genSpec, genErr := runGenerate(t, genBin, c.file)
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
			} else {
				sameIssues(t, "server check", string(checkOut), c.file, c.errors)
			}
			if accepted {
				t.Errorf("serve accepted an invalid case (want %s):\n%s", c.path, serveOut)
			} else if !names(serveOut, c.path) {
				t.Errorf("serve does not name %s:\n%s", c.path, serveOut)
			} else {
				sameIssues(t, "serve", serveOut, c.file, c.errors)
			}
			switch {
			case c.genAccepts && genErr != nil:
				t.Errorf("generate refused a spec it must accept:\n%s", genOut)
			case !c.genAccepts && genErr == nil:
				t.Errorf("generate accepted an invalid case (want %s)", c.path)
			case !c.genAccepts && !names(string(genOut), c.path):
				t.Errorf("generate does not name %s:\n%s", c.path, genOut)
			case !c.genAccepts:
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

func (r reportedIssue) String() string {
	switch {
	case r.def && r.line > 0:
		return fmt.Sprintf("%s default %d", r.path, r.line)
	case r.def:
		return r.path + " default"
	}
	return fmt.Sprintf("%s %d", r.path, r.line)
}

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
// test wrote (found by the test's own reading of it), in line order; with
// more than the cap, the ones printed are among them and the rest counted.
func sameSpecIssues(t *testing.T, out string, spec string, c corpusCase) {
	t.Helper()
	is, more, ok := reported(out)
	if !ok {
		t.Errorf("generate printed no list of issues:\n%s", out)
		return
	}
	at := specLines(t, spec)
	var want []string
	for _, e := range c.errors {
		path := strings.Fields(e)[0]
		if slices.Contains(c.genNot, path) {
			continue
		}
		line, exact := lineOf(at, path)
		want = append(want, reportedIssue{path: path, line: line, def: !exact}.String())
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

// specLines maps every spec path of the config the test wrote into app.cue
// to its line there (an object or list at its opening bracket).
func specLines(t *testing.T, spec string) map[string]int {
	t.Helper()
	start := strings.Index(spec, "{")
	body := spec[start:]
	base := strings.Count(spec[:start], "\n")
	at := map[string]int{}
	dec := json.NewDecoder(strings.NewReader(body))
	lineAt := func() int {
		off := int(dec.InputOffset())
		for off < len(body) && strings.ContainsRune(" \t\r\n:,", rune(body[off])) {
			off++
		}
		return base + 1 + strings.Count(body[:off], "\n")
	}
	var walk func(path string)
	walk = func(path string) {
		line := lineAt()
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("read the spec written: %v", err)
		}
		at[path] = line
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				k, _ := dec.Token()
				sub := k.(string)
				if path != "" {
					sub = path + "." + sub
				}
				walk(sub)
			}
			dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				walk(fmt.Sprintf("%s[%d]", path, i))
			}
			dec.Token()
		}
	}
	walk("")
	return at
}

// lineOf is the line of path in at, or of its nearest written ancestor
// (exact false; 0 when only the document is).
func lineOf(at map[string]int, path string) (int, bool) {
	if l, ok := at[path]; ok {
		return l, true
	}
	for path != "" {
		if i := strings.LastIndexAny(path, ".["); i >= 0 {
			path = path[:i]
		} else {
			path = ""
		}
		if l, ok := at[path]; ok && path != "" {
			return l, false
		}
	}
	return 0, false
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
	for name, src := range map[string]string{"cellgate.cue": schema.Definitions, "app.cue": app} {
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
