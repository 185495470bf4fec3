package tests

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// relayEnv, when set to "<listen addr>,<target addr>", makes the test binary
// run as a bare TCP relay instead of running tests (TestMain checks it
// first): BenchmarkRouterOverhead's same-run baseline for the cost of any
// proxy process between client and cell.
const relayEnv = "CELLGATE_TEST_RELAY"

// runRelayIfAsked runs the relay and exits when relayEnv is set, and
// returns at once otherwise.
func runRelayIfAsked() {
	spec := os.Getenv(relayEnv)
	if spec == "" {
		return
	}
	listen, target, ok := strings.Cut(spec, ",")
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q: want <listen addr>,<target addr>\n", relayEnv, spec)
		os.Exit(2)
	}
	if err := serveRelay(listen, target); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveRelay accepts connections on listen and relays each, byte for byte,
// to a connection of its own to target. It is the floor of a proxy
// process: no parsing, no buffering beyond one read, one goroutine per
// direction, each a read then a write, as a Go proxy needs at least; every
// request crosses it with one wake-up on the way in and one on the way
// out, the same hop the router adds.
func serveRelay(listen, target string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go relayConn(c, target)
	}
}

func relayConn(client net.Conn, target string) {
	cell, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { relayCopy(cell, client) })
	relayCopy(client, cell)
	wg.Wait()
	client.Close()
	cell.Close()
}

// relayCopy copies src to dst with plain reads and writes (io.Copy would
// splice through a pipe: two system calls per direction instead of one),
// then passes the end of src on as a half-close.
func relayCopy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if tc, ok := src.(*net.TCPConn); ok {
		_ = tc.CloseRead()
	}
}

// startRelay runs this test binary as a relay in front of the cell at
// target (a host:port) and waits until the cell's /readyz answers through
// it.
func startRelay(tb testing.TB, target string) *cell {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	addr := freeAddr(tb)
	r := startProcess(tb, "relay", addr, exe, []string{relayEnv + "=" + addr + "," + target})
	r.waitStatus(tb, "/readyz", 200, 10*time.Second)
	return r
}
