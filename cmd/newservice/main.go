// Command newservice writes a new service from this template (make new),
// brings a newer template into such a service (make upgrade) and checks
// that the service's template-owned files are the template's (make
// upgrade-check).
//
// make new writes a copy of the template's tracked files at -dir with the
// template's module path rewritten to -module everywhere it occurs (Go
// code, templates, every go.mod, scripts, docs), a cellgate.lock recording
// the template commit and the sha256 of every template-owned file, an
// OWNERSHIP.md saying who owns what, and a git repository holding it all
// in one commit.
//
// Usage:
//
//	newservice -module example.com/acme/billing -dir ../billing [-template .]
//	newservice upgrade -from <path or git URL> [-dir .] [-generate=true]
//	newservice check [-dir .]
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

// userOwned are the paths a service owns from its first commit: its spec
// and settings, handlers (with their middleware and metrics), tables and
// queries, its own Rego rules, its lock and OWNERSHIP.md. Every other
// copied file, generated ones aside, is template-owned and hashed in the
// lock. A pattern ending in "/" is a directory.
var userOwned = []string{"app/", "schema/app.cue", "schema/settings.cue", "sql/", "policy/app/", lockName, ownershipName}

// generated are the paths cmd/generate writes from the template and the
// service's spec together: neither side owns them, so they are neither
// hashed nor merged; make generate writes them anew after an upgrade and
// make check's drift check holds them to their inputs.
var generated = []string{"gen/"}

// ownershipName is the page written at the new service's root saying what
// the user owns and what the template owns.
const ownershipName = "OWNERSHIP.md"

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
	// Files maps every template-owned file to the sha256 (hex) of the
	// template's content of it at Version, module path rewritten.
	Files map[string]string `json:"files"`
	// LocalChanges are template-owned files the service changed on
	// purpose, each with the reason; the user adds them by hand, and
	// upgrade-check accepts a differing hash only for them.
	LocalChanges []LocalChange `json:"local_changes"`
	// Conflicts are the files the last upgrade left with conflict markers
	// (or could not merge); upgrade-check fails while any is listed. The
	// user removes an entry once the file is resolved.
	Conflicts []string `json:"conflicts,omitempty"`
}

// LocalChange is a template-owned file the service changed deliberately.
type LocalChange struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "upgrade":
			return runUpgrade(args[1:], stdout, stderr)
		case "check":
			return runCheck(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("newservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: newservice -module example.com/acme/billing -dir ../billing [-template .]")
		fmt.Fprintln(stderr, "       newservice upgrade -from <path or git URL of a newer template> [-dir .]")
		fmt.Fprintln(stderr, "       newservice check [-dir .]")
		fs.PrintDefaults()
	}
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
		if templateOwned(lock.UserOwned, name) {
			lock.Files[name] = hash(b)
		}
	}
	// The stamp of the generator's inputs hashes files whose module path
	// was just rewritten: write it anew so make run sees gen/ as fresh.
	if _, err := os.Stat(filepath.Join(dir, "scripts", "genstamp.sh")); err == nil {
		if out, err := exec.Command(filepath.Join(dir, "scripts", "genstamp.sh"), "write").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("scripts/genstamp.sh write: %v: %s", err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ownershipName), ownership(lock), 0o644); err != nil {
		return nil, err
	}
	if err := writeLock(dir, lock); err != nil {
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

// matches reports whether name is one of patterns (a pattern ending in
// "/" is a directory).
func matches(patterns []string, name string) bool {
	for _, p := range patterns {
		if name == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(name, p)) {
			return true
		}
	}
	return false
}

// templateOwned reports whether name is the template's: neither one of the
// service's patterns (the lock's user_owned) nor generated.
func templateOwned(user []string, name string) bool {
	return !matches(user, name) && !matches(generated, name)
}

// hash is the hex sha256 the lock records of a file's content.
func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeLock writes lock as dir's cellgate.lock.
func writeLock(dir string, lock *Lock) error {
	if lock.LocalChanges == nil {
		lock.LocalChanges = []LocalChange{}
	}
	raw, err := json.MarshalIndent(lock, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, lockName), append(raw, '\n'), 0o644)
}

// readLock reads dir's cellgate.lock.
func readLock(dir string) (*Lock, error) {
	raw, err := os.ReadFile(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	var lock Lock
	if err := json.Unmarshal(raw, &lock); err != nil {
		return nil, fmt.Errorf("%s: %v", lockName, err)
	}
	if lock.Version == "" || lock.Module == "" || lock.Files == nil {
		return nil, fmt.Errorf("%s: version, module and files are required", lockName)
	}
	return &lock, nil
}

// ownership is the OWNERSHIP.md of a new service.
func ownership(lock *Lock) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# What this service owns and what the template owns\n\n")
	// The template's module path is named only by the lock and the
	// changelog, so a search for it in the service finds only them.
	fmt.Fprintf(&b, "This service was made from the cellgate template (`make new`); %s records\n", lockName)
	fmt.Fprintf(&b, "the template commit and the sha256 of every template-owned file.\n\n")
	fmt.Fprintf(&b, "**Yours** (never touched by `make upgrade`, never checked by `make upgrade-check`):\n\n")
	for _, p := range lock.UserOwned {
		fmt.Fprintf(&b, "- `%s`\n", p)
	}
	fmt.Fprintf(&b, "\n**Generated** (written by `make generate` from the template and your spec;\n")
	fmt.Fprintf(&b, "`make check` holds them to their inputs):\n\n")
	for _, p := range generated {
		fmt.Fprintf(&b, "- `%s`\n", p)
	}
	fmt.Fprintf(&b, "\n**The template's**: every other file. `make upgrade FROM=<newer template>`\n")
	fmt.Fprintf(&b, "merges a newer template into them (three-way, conflicts left with markers\n")
	fmt.Fprintf(&b, "and listed); `make upgrade-check` (part of `make check`) fails when one of\n")
	fmt.Fprintf(&b, "them differs from the template's version without a reason recorded in\n")
	fmt.Fprintf(&b, "the lock's `local_changes` (`{\"path\": ..., \"reason\": ...}`).\n")
	return []byte(b.String())
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
