package testpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DefaultBinDir holds the PostgreSQL 15 server binaries of the Debian
// packages the project installs; $CELLGATE_PG_BIN overrides it.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// ClusterOptions configures a private cluster. The zero value gives a
// cluster with wal_level = logical, which logical-replication tests need
// and the shared server may not have.
type ClusterOptions struct {
	// BinDir holds initdb, pg_ctl and postgres. Default: $CELLGATE_PG_BIN,
	// else DefaultBinDir.
	BinDir string
	// WALLevel is the server's wal_level. Default: "logical".
	WALLevel string
	// Settings are extra postgresql.conf lines ("name = value"), after the
	// defaults, so they win.
	Settings []string
}

// Cluster is a private PostgreSQL cluster: its own data directory, socket
// directory and TCP port on 127.0.0.1, trust authentication for the
// postgres user. Stop it with Stop (StartCluster does so at cleanup).
//
// CreateDB and URL are safe for concurrent use; Stop is not, and must be
// called once.
type Cluster struct {
	// URL is the admin connection string (database postgres).
	URL string
	// Port is the TCP port it listens on.
	Port int
	// Dir is the temporary directory holding data, socket and log.
	Dir string

	bin     string
	runAs   *syscall.Credential
	dataDir string
}

// StartCluster starts a private cluster for the test and stops and removes
// it at cleanup. It fails the test (never skips) when the binaries are
// missing or the server does not start, naming the log file's tail.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := NewCluster(opts)
	if err != nil {
		t.Fatalf("testpg: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("testpg: %v", err)
		}
	})
	return c
}

// NewCluster starts a private cluster; the caller must Stop it (TestMain
// uses this to share one cluster among a package's tests).
func NewCluster(opts ClusterOptions) (*Cluster, error) {
	opts.BinDir = cmp.Or(opts.BinDir, os.Getenv("CELLGATE_PG_BIN"), DefaultBinDir)
	opts.WALLevel = cmp.Or(opts.WALLevel, "logical")
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("private cluster: %s not found in %s (install postgresql-15 or set CELLGATE_PG_BIN): %w", b, opts.BinDir, err)
		}
	}
	dir, err := os.MkdirTemp("", "cellgate-pg-")
	if err != nil {
		return nil, fmt.Errorf("private cluster: %w", err)
	}
	c := &Cluster{Dir: dir, bin: opts.BinDir, dataDir: filepath.Join(dir, "data")}
	// PostgreSQL refuses to run as root: as root, the server runs as the
	// postgres user, which must own the directory.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("private cluster: running as root needs a postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.runAs = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("private cluster: %w", err)
		}
	}
	if err := c.run("initdb", "-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.Port = port
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"wal_level = " + opts.WALLevel,
		"max_replication_slots = 32",
		"max_wal_senders = 32",
		"max_connections = 200",
		// A test cluster is thrown away: durability only costs time.
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"shared_buffers = 64MB",
	}
	conf = append(conf, opts.Settings...)
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("\n# cellgate testpg\n" + strings.Join(conf, "\n") + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private cluster: postgresql.conf: %w", err)
	}
	logFile := filepath.Join(dir, "server.log")
	if err := c.run("pg_ctl", "start", "-w", "-t", "60", "-D", c.dataDir, "-l", logFile); err != nil {
		tail, _ := os.ReadFile(logFile)
		_ = c.run("pg_ctl", "stop", "-m", "immediate", "-D", c.dataDir)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w; server log: %s", err, lastLines(string(tail), 10))
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c, nil
}

// CreateDB creates a fresh database on the cluster and returns its URL;
// it is dropped at the test's cleanup (before the cluster stops, since
// cleanups run last-registered first).
func (c *Cluster) CreateDB(t testing.TB, prefix string) string {
	t.Helper()
	return createDB(t, c.URL, prefix)
}

// Stop stops the server at once (the data is thrown away) and removes its
// directory.
func (c *Cluster) Stop() error {
	err := c.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", c.dataDir)
	return errors.Join(err, os.RemoveAll(c.Dir))
}

// Crash stops the server as a crash would (pg_ctl stop -m immediate: no
// shutdown checkpoint, recovery from the WAL at the next start) and keeps
// its data for Restart.
func (c *Cluster) Crash() error {
	return c.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", c.dataDir)
}

// Restart starts the server again on its port after Crash.
func (c *Cluster) Restart() error {
	return c.run("pg_ctl", "start", "-w", "-t", "60", "-D", c.dataDir, "-l", filepath.Join(c.Dir, "server.log"))
}

// run runs one of the cluster's binaries as the server's user.
func (c *Cluster) run(bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, bin), args...)
	cmd.Dir = c.Dir
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("private cluster: %s %s: %w: %s", bin, strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("private cluster: no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// dbURL returns admin with its database replaced by name.
func dbURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
