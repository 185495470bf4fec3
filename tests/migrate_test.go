package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scratchCopy copies the repository's files (tracked and new, not ignored)
// into a temporary directory, so a test can change a migration and build
// the server from it.
func scratchCopy(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dir := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		raw, err := os.ReadFile(filepath.Join("..", name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildServer builds cmd/server of the scratch copy dir.
func buildServer(t testing.TB, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/server")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// runServer runs a server subcommand to completion.
func runServer(t testing.TB, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// readyz returns /readyz's status and its failed checks.
func readyz(t testing.TB, c *cell) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(c.url + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body struct {
		Failed map[string]string `json:"failed"`
	}
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body.Failed
}

// TestCellMigrationFailureIsRepairable: a migration PostgreSQL rejects
// keeps the cell unready, /readyz and the log name the database, the file
// and PostgreSQL's error (and nothing untrue), the run is not retried in a
// loop, `server migrate status` shows each database where it stands, and
// `migrate force` with the fixed file recovers.
func TestCellMigrationFailureIsRepairable(t *testing.T) {
	dir := scratchCopy(t)
	mig := filepath.Join(dir, "sql", "migrations")
	write := func(name, sql string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mig, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// sqlc would accept this file; PostgreSQL rejects its second statement.
	write("000003_add_nickname.up.sql", "ALTER TABLE accounts ADD COLUMN nickname text;\nALTER TABLE acounts ADD COLUMN x int;\n")
	write("000003_add_nickname.down.sql", "ALTER TABLE accounts DROP COLUMN nickname;\n")
	bad := buildServer(t, dir, "server-bad")

	env := cellEnv(t)
	c := startProcessCell(t, bad, env)
	c.waitStatus(t, "/healthz", 200, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	var failed map[string]string
	for {
		code, f := readyz(t, c)
		if code == http.StatusServiceUnavailable && strings.Contains(f["migrations"], "000003_add_nickname.up.sql") {
			failed = f
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never named the failed file: %d %v", code, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
	msg := failed["migrations"]
	for _, want := range []string{"shard-0:", `relation "acounts" does not exist`, "SQLSTATE 42P01", "dirty at version 3", "server migrate -db shard-0 force 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("/readyz migrations = %q, lacks %q", msg, want)
		}
	}
	for name, m := range failed {
		if strings.Contains(m, "still running") || strings.Contains(m, "still being created") {
			t.Errorf("/readyz %s says %q while the migration failed", name, m)
		}
	}
	// It stays unready and does not retry the rejected file.
	time.Sleep(1500 * time.Millisecond)
	if code, _ := readyz(t, c); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d after a failed migration, want 503", code)
	}
	logs := c.Logs()
	if n := strings.Count(logs, "migration failed"); n != 1 {
		t.Errorf("%d 'migration failed' log lines, want exactly 1 (no retry loop):\n%s", n, logs)
	}
	if !strings.Contains(logs, `"file":"000003_add_nickname.up.sql"`) || !strings.Contains(logs, `"database":"shard-0"`) {
		t.Errorf("the log does not name the database and the file:\n%s", logs)
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()

	// status: shard-0 dirty at 2, shard-1 untouched, the control database
	// gets no app migrations; exit 1 because one database needs repair.
	out, err := runServer(t, bad, env, "migrate", "status")
	if err == nil {
		t.Errorf("migrate status exited 0 with a dirty database:\n%s", out)
	}
	for _, want := range []string{
		"DATABASE  SCHEMA  VERSION  STATE",
		"shard-0   app     3/3      DIRTY: 000003_add_nickname.up.sql failed",
		"shard-1   app     -/3      behind: 3 pending (000001_accounts.up.sql, 000002_replica_identity.up.sql, 000003_add_nickname.up.sql)",
		"the app schema is not at one version on every database",
	} {
		if !strings.Contains(squashSpaces(out), squashSpaces(want)) {
			t.Errorf("migrate status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(squashSpaces(out), "control app") {
		t.Errorf("the control database got the app's migrations (database.app_migrations defaults to shards):\n%s", out)
	}

	// Repair: fix the file, force the version before it, boot.
	write("000003_add_nickname.up.sql", "ALTER TABLE accounts ADD COLUMN nickname text;\n")
	good := buildServer(t, dir, "server-good")
	if out, err := runServer(t, good, env, "migrate", "-db", "shard-0", "force", "2"); err != nil {
		t.Fatalf("migrate force 2: %v\n%s", err, out)
	} else if !strings.Contains(squashSpaces(out), squashSpaces("shard-0   app     2/3      behind: 1 pending (000003_add_nickname.up.sql)")) {
		t.Errorf("migrate force printed:\n%s", out)
	}
	c2 := startProcessCell(t, good, env)
	c2.waitStatus(t, "/readyz", 200, 30*time.Second)
	out, err = runServer(t, good, env, "migrate", "status")
	if err != nil || strings.Count(out, "up to date") != 9 { // shard-0, shard-1 app; control, shard-0, shard-1 jobs; control plans; control shardmap; shard-0, shard-1 idempotency
		t.Fatalf("migrate status after repair (%v):\n%s", err, out)
	}
}

// startProcessCell starts bin as a cell on a free port.
func startProcessCell(t testing.TB, bin string, env []string) *cell {
	t.Helper()
	addr := freeAddr(t)
	return startProcess(t, "cell", addr, bin, append([]string{"CELLGATE_ADDRESS=" + addr}, env...))
}

// squashSpaces folds runs of spaces into one: the status table's columns
// are as wide as the longest schema name, which the test need not know.
func squashSpaces(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' }), " ")
}
