// Command newservice writes a new service from this template (make new):
// a copy of the template's tracked files at -dir with the template's module
// path rewritten to -module everywhere it occurs (Go code, templates, every
// go.mod, scripts, docs), a cellgate.lock recording the template commit and
// the sha256 of every template-owned file, and a git repository holding it
// all in one commit.
//
// Usage:
//
//	newservice -module example.com/acme/billing -dir ../billing [-template .]
//
// It is a one-shot command with no concurrency.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// templateModule is the module path the template's files are written with.
const templateModule = "github.com/cellgate/cellgate"

// lockName is the lock file written at the new service's root.
const lockName = "cellgate.lock"

// userOwned are the paths a service owns from its first commit: its spec,
// handlers, tables and queries. Every other copied file is template-owned
// and hashed in the lock. A pattern ending in "/" is a directory.
var userOwned = []string{"app/", "schema/app.cue", "sql/", "policy/app/", lockName}

// Lock is the content of cellgate.lock.
type Lock struct {
	// Template is the template's module path, the source of the service.
	Template string `json:"template"`
	// Version is the template's git commit the service was made from.
	Version string `json:"version"`
	// Module is the service's module path.
	Module string `json:"module"`
	// UserOwned are the path patterns the service owns (never hashed).
	UserOwned []string `json:"user_owned"`
	// Files maps every template-owned file to the sha256 (hex) of its
	// content as written into the service.
	Files map[string]string `json:"files"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("newservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mod := fs.String("module", "", "module path of the new service, e.g. example.com/acme/billing")
	dir := fs.String("dir", "", "directory to write the new service into (must not exist or be empty)")
	tmpl := fs.String("template", ".", "root of the template's git checkout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *mod == "" || *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "newservice: -module and -dir are required (make new MODULE=example.com/acme/billing DIR=../billing)")
		fs.Usage()
		return 2
	}
	lock, err := create(*tmpl, *dir, *mod)
	if err != nil {
		fmt.Fprintln(stderr, "newservice:", err)
		return 1
	}
	fmt.Fprintf(stdout, "newservice: %s (module %s) from %s@%s, %d template-owned files in %s\n",
		*dir, *mod, lock.Template, short(lock.Version), len(lock.Files), lockName)
	return 0
}

// create writes the service at dir and returns its lock.
func create(tmpl, dir, mod string) (*Lock, error) {
	if !validModule(mod) {
		return nil, fmt.Errorf("-module %q: want a module path such as example.com/acme/billing", mod)
	}
	if mod == templateModule {
		return nil, fmt.Errorf("-module %q is the template's own module path", mod)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("-dir %s exists and is not empty", dir)
	}
	version, err := git(tmpl, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	// Files are copied as they are in the working tree: a tree with
	// changes not committed is recorded as such.
	if st, err := git(tmpl, "status", "--porcelain", "--untracked-files=no"); err != nil {
		return nil, err
	} else if st != "" {
		version += "+dirty"
	}
	list, err := git(tmpl, "ls-files", "-z")
	if err != nil {
		return nil, err
	}
	lock := &Lock{Template: templateModule, Version: version, Module: mod, UserOwned: userOwned, Files: map[string]string{}}
	for _, name := range strings.Split(strings.TrimRight(list, "\x00"), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(tmpl, name)
		info, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet committed
		}
		if err != nil {
			return nil, err
		}
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file (%s)", name, info.Mode().Type())
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		b = rewrite(b, mod)
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			return nil, err
		}
		if !owned(name) {
			sum := sha256.Sum256(b)
			lock.Files[name] = hex.EncodeToString(sum[:])
		}
	}
	// The stamp of the generator's inputs hashes files whose module path
	// was just rewritten: write it anew so make run sees gen/ as fresh.
	if _, err := os.Stat(filepath.Join(dir, "scripts", "genstamp.sh")); err == nil {
		if out, err := exec.Command(filepath.Join(dir, "scripts", "genstamp.sh"), "write").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("scripts/genstamp.sh write: %v: %s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "gen", ".inputs.sha256"))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		lock.Files["gen/.inputs.sha256"] = hex.EncodeToString(sum[:])
	}
	raw, err := json.MarshalIndent(lock, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, lockName), append(raw, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := commit(dir, lock); err != nil {
		return nil, err
	}
	return lock, nil
}

// validModule is a loose check of a module path: lower-case letters,
// digits and -._~/ , a dot in the first element, no empty element; the Go
// tool's own check runs when the service is built.
func validModule(mod string) bool {
	first, _, _ := strings.Cut(mod, "/")
	if !strings.Contains(first, ".") {
		return false
	}
	for _, el := range strings.Split(mod, "/") {
		if el == "" || el == "." || el == ".." {
			return false
		}
	}
	for _, r := range mod {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~/", r)) {
			return false
		}
	}
	return true
}

// rewrite replaces the template's module path in a text file; a binary
// file (one holding a NUL byte) is copied as it is.
func rewrite(b []byte, mod string) []byte {
	if bytes.IndexByte(b, 0) >= 0 {
		return b
	}
	return bytes.ReplaceAll(b, []byte(templateModule), []byte(mod))
}

// owned reports whether the service owns name (userOwned).
func owned(name string) bool {
	for _, p := range userOwned {
		if name == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(name, p)) {
			return true
		}
	}
	return false
}

// commit makes dir a git repository with everything in one commit. Without
// a configured identity the commit is made as "cellgate new".
func commit(dir string, lock *Lock) error {
	if _, err := git(dir, "init", "-q"); err != nil {
		return err
	}
	if _, err := git(dir, "add", "-A"); err != nil {
		return err
	}
	args := []string{"commit", "-q", "-m", fmt.Sprintf("%s: a new service from %s@%s", lock.Module, lock.Template, short(lock.Version))}
	if _, err := git(dir, "config", "user.email"); err != nil {
		args = append([]string{"-c", "user.name=cellgate new", "-c", "user.email=new@cellgate.invalid"}, args...)
	}
	_, err := git(dir, args...)
	return err
}

// git runs git in dir and returns its trimmed standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func short(v string) string { return v[:min(len(v), 12)] }
