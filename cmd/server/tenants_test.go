package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/testpg"
)

// plansConfig writes a cell config with free/pro plans and points the
// control database at a fresh database.
func plansConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cell.json")
	cfg := `{"tenancy": {"source": "session", "default_plan": "free", "plans": [
		{"name": "free", "max_concurrent_requests": 4, "rate_per_second": 5, "burst": 10, "jobs": {"max_concurrent": 1, "weight": 1}},
		{"name": "pro", "max_concurrent_requests": 32, "rate_per_second": 50, "burst": 100, "jobs": {"max_concurrent": 3, "weight": 4}}]}}`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTenantsCommand(t *testing.T) {
	cfg := plansConfig(t)
	dsn := testpg.CreateDB(t, "tenantscli")
	run := func(args ...string) string {
		t.Helper()
		t.Setenv("CELLGATE_CONTROL_DSN", dsn)
		out, errOut, err := runCLI(t, append([]string{"tenants", "-config", cfg, "-by", "alice"}, args...)...)
		if err != nil {
			t.Fatalf("tenants %v: %v\n%s", args, err, errOut)
		}
		return squash(out)
	}
	out := run("list")
	if !strings.Contains(out, "no rows: every tenant is on the token's plan or the default plan free") {
		t.Fatalf("list of an empty table:\n%s", out)
	}
	out = run("set", "acme", "plan=pro")
	for _, want := range []string{"tenant acme: plan pro (table), updated by alice at ", "max_concurrent_requests 32", "jobs.weight 4"} {
		if !strings.Contains(out, want) {
			t.Fatalf("set plan: no %q in\n%s", want, out)
		}
	}
	// An incident clamp, then a shadow rollout of a tighter rate.
	run("set", "acme", "max_concurrent_requests=2")
	out = run("set", "acme", "rate_per_second=1", "shadow=rate_per_second")
	for _, want := range []string{"max_concurrent_requests 2 override", "rate_per_second 50 plan pro 1 (counted, not enforced)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("set overrides: no %q in\n%s", want, out)
		}
	}
	out = run("set", "acme", "enforce=rate_per_second")
	if !strings.Contains(out, "rate_per_second 1 override") {
		t.Fatalf("enforce: \n%s", out)
	}
	out = run("list")
	if !strings.Contains(out, "acme pro max_concurrent_requests=2, rate_per_second=1 alice") {
		t.Fatalf("list:\n%s", out)
	}
	out = run("unset", "acme", "plan", "max_concurrent_requests")
	if !strings.Contains(out, "tenant acme: plan free (default)") || !strings.Contains(out, "max_concurrent_requests 4 ") {
		t.Fatalf("unset:\n%s", out)
	}
	out = run("get", "acme")
	if !strings.Contains(out, "rate_per_second 1 override") {
		t.Fatalf("get:\n%s", out)
	}
}

func TestTenantsCommandRefusesBadInput(t *testing.T) {
	cfg := plansConfig(t)
	t.Setenv("CELLGATE_CONTROL_DSN", testpg.CreateDB(t, "tenantsbad"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "acme", "plan=gold"}, `plan "gold" is not in the spec; one of free, pro`},
		{[]string{"set", "acme", "max_concurrent=2"}, `unknown limit "max_concurrent"`},
		{[]string{"set", "acme", "jobs.weight=0"}, "jobs.weight: must be from 1 to 1000, got 0"},
		{[]string{"set", "acme", "burst=x"}, `burst: "x" is not a number`},
		{[]string{"set", "acme", "shadow=burst"}, "burst has no override to put in or out of shadow mode"},
		{[]string{"frob"}, `tenants: unknown action "frob"`},
		{[]string{"get"}, "tenants get: want one TENANT"},
	} {
		t.Setenv("CELLGATE_CONFIG", "")
		_, errOut, err := runCLI(t, append([]string{"tenants", "-config", cfg}, c.args...)...)
		if err == nil || !strings.Contains(err.Error()+errOut, c.want) {
			t.Errorf("tenants %v: err %v, want %q", c.args, err, c.want)
		}
	}
}

// squash collapses the tables' column padding to one space per gap.
func squash(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
