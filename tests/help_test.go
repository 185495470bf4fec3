package tests

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsAnswerHelp: every command of the repository, and every
// subcommand of the server, answers -h and --help with its usage and exit
// status 0 (a request for help is not an error).
func TestCommandsAnswerHelp(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/",
		"../cmd/router", "../cmd/slotmove", "../cmd/plan", "../cmd/generate", "../cmd/benchtable", "../cmd/newservice")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the commands: %v\n%s", err, out)
	}
	bin := func(name string) string { return filepath.Join(dir, name) }
	cases := []struct {
		bin  string
		args []string
		// want are strings the usage holds: a flag of the command, so the
		// output is its usage and not some other message.
		want []string
	}{
		{serverBin, nil, []string{"serve", "migrate", "export", "check", "devdb"}},
		{serverBin, []string{"serve"}, []string{"usage: server serve", "-config"}},
		{serverBin, []string{"migrate"}, []string{"usage: server migrate", "-config"}},
		{serverBin, []string{"export"}, []string{"usage: server export", "-config"}},
		{serverBin, []string{"check"}, []string{"usage: server check", "-config"}},
		{serverBin, []string{"devdb"}, []string{"usage: server devdb", "-base"}},
		{bin("router"), nil, []string{"-addr", "-slotmap"}},
		{bin("slotmove"), nil, []string{"-map", "-slots"}},
		{bin("plan"), nil, []string{"-base", "-spec"}},
		{bin("generate"), nil, []string{"-spec", "-check"}},
		{bin("benchtable"), nil, []string{"usage: benchtable", "-strict"}},
		{bin("newservice"), nil, []string{"-module", "-dir"}},
	}
	for _, c := range cases {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, c.args...), h)
			name := strings.Join(append([]string{filepath.Base(c.bin)}, args...), " ")
			out, err := exec.Command(c.bin, args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v, want exit 0\n%s", name, err, out)
				continue
			}
			text := string(out)
			if !strings.Contains(strings.ToLower(text), "usage") {
				t.Errorf("%s printed no usage:\n%s", name, text)
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("%s: the usage lacks %q:\n%s", name, w, text)
				}
			}
			if strings.Contains(text, "help requested") {
				t.Errorf("%s reports the help request as an error:\n%s", name, text)
			}
		}
	}
}
