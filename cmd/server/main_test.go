package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the server's command line as main does, without exiting.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	t.Setenv("CELLGATE_CONFIG", "")
	var so, se bytes.Buffer
	err = run(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &so, &se)
	return so.String(), se.String(), err
}

func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if errOut != "" {
			t.Errorf("%v wrote to stderr: %q", args, errOut)
		}
		if !strings.HasPrefix(out, "usage: server [command]") {
			t.Errorf("%v: usage does not start with the synopsis:\n%s", args, out)
		}
		for _, name := range []string{"serve", "migrate", "check", "devdb"} {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%v: usage does not list %s:\n%s", args, name, out)
			}
		}
	}
}

// TestCommandHelp: each command's -h prints that command's usage and only
// its own flags, to stdout, and succeeds (it used to print "Usage of serve"
// with devdb's flag for every command, then log an error).
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := runCLI(t, c.name, "-h")
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("stderr: %q", errOut)
			}
			if !strings.HasPrefix(out, "usage: server "+c.name+" ") {
				t.Errorf("usage does not name %s:\n%s", c.name, out)
			}
			if !strings.Contains(out, "-config") {
				t.Errorf("usage lacks -config:\n%s", out)
			}
			if got, want := strings.Contains(out, "-base"), c.name == "devdb"; got != want {
				t.Errorf("-base in the usage of %s: %v, want %v:\n%s", c.name, got, want, out)
			}
			if got, want := strings.Contains(out, "-db"), c.name == "migrate"; got != want {
				t.Errorf("-db in the usage of %s: %v, want %v:\n%s", c.name, got, want, out)
			}
		})
	}
}

func TestUnknownCommandListsAll(t *testing.T) {
	_, errOut, err := runCLI(t, "foo")
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want a usage error", err)
	}
	if want := `unknown command "foo"; want one of serve, migrate, export, check, tenants, devdb`; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if !strings.Contains(errOut, "commands:") {
		t.Errorf("no usage on stderr:\n%s", errOut)
	}
}

func TestBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"check", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "-base", "x"}, "flag provided but not defined: -base"},
		{[]string{"devdb", "extra"}, `unexpected argument "extra"`},
		{[]string{"migrate", "frob"}, `migrate: unknown action "frob"; want status, up, down N or force V`},
		{[]string{"migrate", "down"}, "migrate down needs a number"},
		{[]string{"migrate", "force", "x"}, "migrate force x: want a number (down: >= 1, force: >= -1)"},
		{[]string{"migrate", "status", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"migrate", "-schema", "nope", "status"}, `migrate: -schema "nope": want app, jobs, plans, idempotency or shardmap`},
	} {
		_, errOut, err := runCLI(t, tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || err.Error() != tc.want {
			t.Errorf("%v: err = %v, want usage error %q", tc.args, err, tc.want)
		}
		if !strings.Contains(errOut, "usage: server ") {
			t.Errorf("%v: no usage on stderr:\n%s", tc.args, errOut)
		}
	}
}

// TestMigrateHelpAfterAction: migrate parses flags after its action too,
// and -h there is help as well.
func TestMigrateHelpAfterAction(t *testing.T) {
	out, errOut, err := runCLI(t, "migrate", "status", "-h")
	if err != nil || errOut != "" || !strings.HasPrefix(out, "usage: server migrate ") || !strings.Contains(out, "force V") {
		t.Fatalf("migrate status -h: err %v, stderr %q, stdout:\n%s", err, errOut, out)
	}
}

func TestCheck(t *testing.T) {
	out, _, err := runCLI(t, "check")
	if err != nil || out != "config ok\n" {
		t.Fatalf("check with the spec's defaults: %q, %v", out, err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "cell.json")
	if err := os.WriteFile(bad, []byte(`{"no_such_block": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCLI(t, "check", "-config", bad)
	var ue usageError
	if err == nil || errors.As(err, &ue) || out != "" {
		t.Fatalf("check of a config with an unknown field: out %q, err %v; want a config error", out, err)
	}
	if !strings.Contains(err.Error(), "no_such_block") {
		t.Errorf("the error does not name the unknown field: %v", err)
	}
}
