// Package tests holds cellgate's end-to-end tests: they build the real
// binaries, boot real processes on loopback ports and talk to a real
// PostgreSQL (never a mock). Each test creates its own databases.
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// serverBin is the cell binary built once for the package.
var serverBin string

func TestMain(m *testing.M) {
	runRelayIfAsked() // as BenchmarkRouterOverhead's relay process, it never returns
	dir, err := os.MkdirTemp("", "cellgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverBin = filepath.Join(dir, "server")
	build := exec.Command("go", "build", "-o", serverBin, "../cmd/server")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cmd/server:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
