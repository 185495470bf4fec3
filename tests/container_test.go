package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/slots"
)

// The drain deadline of the cells and the router: the spec's
// server.shutdown_timeout default, which the containers run with.
const containerShutdownTimeout = 15 * time.Second

// podman runs podman as these machines need it (and as docs/image.md
// shows): rootful, the runc runtime, a containers.conf without default
// ulimits (CONTAINERS_CONF), never pulling.
type podman struct{ conf string }

// needPodman returns the podman runner. Without podman and runc the test
// fails in CI (make test installs them: scripts/test-deps.sh) and is skipped elsewhere.
func needPodman(t *testing.T) podman {
	t.Helper()
	for _, bin := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := bin + " not found: `make podman` (or make test) installs podman and runc"
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	conf := filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return podman{conf: conf}
}

func (p podman) cmd(args ...string) *exec.Cmd {
	c := exec.Command("podman", append([]string{"--runtime", "runc"}, args...)...)
	c.Env = append(os.Environ(), "CONTAINERS_CONF="+p.conf)
	return c
}

// run runs podman and returns its trimmed stdout; a failure fails the test.
func (p podman) run(t testing.TB, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := p.cmd(args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// buildAndLoadImage runs `make image`'s command into a temporary archive
// named ref, loads it and removes it from podman's storage at cleanup.
func buildAndLoadImage(t *testing.T, p podman, ref string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "cellgate.oci.tar")
	build := exec.Command("go", "run", ".", "-root", "../..", "-o", archive, "-ref", ref)
	build.Dir = "../tools/image"
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("build the image: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[len(lines)-1] != archive {
		t.Fatalf("the image command's last line is %q, want the archive path %q", lines[len(lines)-1], archive)
	}
	t.Log(lines[len(lines)-2])
	p.run(t, "load", "-i", archive)
	t.Cleanup(func() { _ = p.cmd("rmi", "-f", ref).Run() })
}

// startContainer runs the image detached on the host network with a
// read-only root filesystem (as Kubernetes manifests should), env, mounts
// and args (an entrypoint override first, if any), and removes it at
// cleanup, logging its output when the test failed.
func startContainer(t *testing.T, p podman, name, ref string, env []string, entrypoint string, mounts []string, args ...string) {
	t.Helper()
	cmdline := []string{"run", "-d", "--name", name, "--network", "host", "--pull=never", "--read-only"}
	for _, e := range env {
		cmdline = append(cmdline, "-e", e)
	}
	for _, m := range mounts {
		cmdline = append(cmdline, "-v", m)
	}
	if entrypoint != "" {
		cmdline = append(cmdline, "--entrypoint", entrypoint)
	}
	cmdline = append(cmdline, ref)
	p.run(t, append(cmdline, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := p.cmd("logs", name).CombinedOutput()
			t.Logf("container %s logs:\n%s", name, logs)
		}
		_ = p.cmd("rm", "-f", "-t", "0", name).Run()
	})
}

// exitCode waits for the container to exit and returns its exit code.
func (p podman) exitCode(t testing.TB, name string) int {
	t.Helper()
	code, err := strconv.Atoi(p.run(t, "wait", name))
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestContainersRouteAndDrain runs the image the way it is deployed: two
// cells (each on its own databases) and the router with the two cells'
// slot map, as podman containers on the host network. Tenants land on
// their cells through the router; SIGTERM drains the router and a cell:
// each stops accepting, finishes a request that was in flight (its body
// still arriving) and exits 0 within the shutdown timeout.
func TestContainersRouteAndDrain(t *testing.T) {
	p := needPodman(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	ref := "localhost/cellgate-e2e:" + id
	buildAndLoadImage(t, p, ref)

	var cs [2]*runningCell
	var names [2]string // the cells' containers
	for i := range cs {
		env := cellEnv(t)
		addr := freeAddr(t)
		env = append(env, "CELLGATE_ADDRESS="+addr)
		names[i] = fmt.Sprintf("cellgate-e2e-%s-cell-%d", id, i+1)
		startContainer(t, p, names[i], ref, env, "", nil)
		cs[i] = &runningCell{cell: &cell{url: "http://" + addr}, addr: addr, env: env}
	}
	for _, c := range cs {
		c.waitStatus(t, "/readyz", 200, 60*time.Second)
	}

	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{
		{Name: "cell-1", URL: cs[0].url, Slots: []string{"0-8191"}},
		{Name: "cell-2", URL: cs[1].url, Slots: []string{"8192-16383"}},
	}})
	routerAddr := freeAddr(t)
	routerName := "cellgate-e2e-" + id + "-router"
	startContainer(t, p, routerName, ref, []string{"CELLGATE_ROUTER_ADDRESS=" + routerAddr}, "/usr/local/bin/router",
		[]string{mapFile + ":/etc/cellgate/slotmap.json:ro"}, "-slotmap", "/etc/cellgate/slotmap.json", "-health-interval", "200ms")
	router := &cell{url: "http://" + routerAddr}
	router.waitStatus(t, "/readyz", 200, 30*time.Second)

	// Every tenant's order lands on its own cell, and the router says which.
	groups := []struct {
		cell    string
		own     *runningCell
		tenants []string
	}{
		{"cell-1", cs[0], tenantsInRange("ctr-one", slots.Range{Lo: 0, Hi: 8191}, 2)},
		{"cell-2", cs[1], tenantsInRange("ctr-two", slots.Range{Lo: 8192, Hi: 16383}, 2)},
	}
	account := map[string]int64{}
	for _, g := range groups {
		for _, tn := range g.tenants {
			account[tn] = seedAccount(t, g.own, tn)
			resp, body := httpCall(t, "POST", router.url+"/orders", tn, fmt.Sprintf(`{"account_id":%d,"amount_cents":100,"note":"container"}`, account[tn]))
			if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Cellgate-Cell") != g.cell {
				t.Fatalf("order of %s via the router: %d cell %q %s", tn, resp.StatusCode, resp.Header.Get("X-Cellgate-Cell"), body)
			}
			if resp, body := httpCall(t, "GET", g.own.url+fmt.Sprintf("/orders?account_id=%d", account[tn]), tn, ""); resp.StatusCode != 200 || !strings.Contains(string(body), "container") {
				t.Fatalf("order of %s is not on %s: %d %s", tn, g.cell, resp.StatusCode, body)
			}
		}
	}

	// SIGTERM the router while an order through it is in flight.
	tn := groups[0].tenants[0]
	inflight := startSlowOrder(t, routerAddr, tn, account[tn])
	p.run(t, "kill", "-s", "TERM", routerName)
	drainStarted := time.Now()
	waitListenerClosed(t, routerAddr, containerShutdownTimeout)
	status, header := inflight.finish(t)
	if status != http.StatusCreated || header.Get("X-Cellgate-Cell") != "cell-1" {
		t.Fatalf("in-flight order through the draining router: %d cell %q", status, header.Get("X-Cellgate-Cell"))
	}
	if code := p.exitCode(t, routerName); code != 0 {
		t.Fatalf("router exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("router: SIGTERM → exit 0 in %s, the in-flight order answered 201", time.Since(drainStarted).Round(time.Millisecond))
	if d := time.Since(drainStarted); d > containerShutdownTimeout {
		t.Errorf("router took %s to exit; the shutdown timeout is %s", d, containerShutdownTimeout)
	}

	// `podman stop` (SIGTERM, then SIGKILL after -t seconds) a cell with a
	// request in flight.
	tn = groups[1].tenants[0]
	cellName := names[1]
	inflight = startSlowOrder(t, cs[1].addr, tn, account[tn])
	stopped := make(chan error, 1)
	drainStarted = time.Now()
	go func() {
		stopped <- p.cmd("stop", "-t", strconv.Itoa(int(2*containerShutdownTimeout/time.Second)), cellName).Run()
	}()
	waitListenerClosed(t, cs[1].addr, containerShutdownTimeout)
	if status, _ := inflight.finish(t); status != http.StatusCreated {
		t.Fatalf("in-flight order on the draining cell: %d", status)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("podman stop: %v", err)
	}
	if code := p.exitCode(t, cellName); code != 0 {
		t.Fatalf("cell exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("cell-2: podman stop → exit 0 in %s, the in-flight order answered 201", time.Since(drainStarted).Round(time.Millisecond))
	if d := time.Since(drainStarted); d > containerShutdownTimeout {
		t.Errorf("cell took %s to exit; the shutdown timeout is %s", d, containerShutdownTimeout)
	}
	// The cell that was not stopped still serves its tenants directly.
	if resp, body := httpCall(t, "GET", cs[0].url+fmt.Sprintf("/account?id=%d", account[groups[0].tenants[0]]), groups[0].tenants[0], ""); resp.StatusCode != 200 {
		t.Fatalf("cell-1 after the others stopped: %d %s", resp.StatusCode, body)
	}
}

// slowOrder is a POST /orders whose headers and first half of the body
// have been sent; finish sends the rest and reads the answer.
type slowOrder struct {
	conn net.Conn
	rest []byte
}

func startSlowOrder(t *testing.T, addr, tenant string, accountID int64) *slowOrder {
	t.Helper()
	body := fmt.Sprintf(`{"account_id":%d,"amount_cents":7,"note":"in flight during SIGTERM"}`, accountID)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := fmt.Sprintf("POST /orders HTTP/1.1\r\nHost: %s\r\nX-Tenant-ID: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		addr, tenant, len(body))
	half := len(body) / 2
	if _, err := conn.Write([]byte(head + body[:half])); err != nil {
		t.Fatal(err)
	}
	// Let the server read the head and start the handler before the signal.
	time.Sleep(200 * time.Millisecond)
	return &slowOrder{conn: conn, rest: []byte(body[half:])}
}

func (s *slowOrder) finish(t *testing.T) (int, http.Header) {
	t.Helper()
	if _, err := s.conn.Write(s.rest); err != nil {
		t.Fatalf("the rest of the in-flight body: %v", err)
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(containerShutdownTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(s.conn), nil)
	if err != nil {
		t.Fatalf("the in-flight request's answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// waitListenerClosed waits until addr refuses connections: the process
// has begun to drain.
func waitListenerClosed(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if c != nil {
			c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s still accepts connections %s after SIGTERM", addr, within)
}
