package deploytest

import (
	"os"
	"os/exec"
	"testing"
)

// tool finds a command-line tool the tests run. Missing, it fails under CI
// (make test installs it: scripts/test-deps.sh) and skips elsewhere, naming the Debian package.
func tool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s is not installed (CI is set): apt-get install -y %s, as make test does (scripts/test-deps.sh)", name, pkg)
	}
	tb.Skipf("%s is not installed: apt-get install -y %s", name, pkg)
	return ""
}
