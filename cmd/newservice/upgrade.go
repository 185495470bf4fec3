package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// runUpgrade is `newservice upgrade` (make upgrade FROM=...).
func runUpgrade(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("newservice upgrade", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "path or git URL of the newer template (its HEAD is taken)")
	dir := fs.String("dir", ".", "root of the service to upgrade (holds cellgate.lock)")
	gen := fs.Bool("generate", true, "run make generate after a merge without conflicts")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *from == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "newservice upgrade: -from is required (make upgrade FROM=<path or git URL of a newer template>)")
		fs.Usage()
		return 2
	}
	res, err := upgrade(*dir, *from, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "newservice upgrade:", err)
		return 1
	}
	res.print(stdout)
	switch {
	case len(res.conflicts) > 0:
		fmt.Fprintln(stdout, "next: resolve the conflicts above, remove them from the lock's conflicts list (record a local_changes reason for an edit you keep), then run make generate and make upgrade-check")
		return 1
	case *gen:
		cmd := exec.Command("make", "generate")
		cmd.Dir = *dir
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(stdout, "next: make generate failed (%v); fix what it names and run make generate\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "upgrade: make generate done; review with git diff and commit")
	default:
		fmt.Fprintln(stdout, "next: make generate, then review with git diff and commit")
	}
	return 0
}

// result is what an upgrade did, file by file.
type result struct {
	from, to                         string
	merged, added, deleted, replaced []string
	conflicts                        []string // "path: why"
	changelog                        string
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "upgrade: template %s -> %s\n", short(r.from), short(r.to))
	if r.changelog != "" {
		fmt.Fprintf(w, "CHANGELOG.md entries new in this template:\n%s\n", r.changelog)
	}
	for _, l := range []struct {
		what  string
		files []string
	}{{"updated", r.replaced}, {"merged (your edits kept)", r.merged}, {"added", r.added}, {"deleted", r.deleted}, {"CONFLICT", r.conflicts}} {
		for _, f := range l.files {
			fmt.Fprintf(w, "  %-25s %s\n", l.what, f)
		}
	}
	fmt.Fprintf(w, "upgrade: %d updated, %d merged, %d added, %d deleted, %d conflicts\n",
		len(r.replaced), len(r.merged), len(r.added), len(r.deleted), len(r.conflicts))
}

// upgrade merges the template at from's HEAD into the service at dir:
// for each template-owned file, base is the template at the lock's
// version, theirs the template at HEAD (both with the module path
// rewritten as make new does) and ours the service's file. It writes the
// files and the lock; it does not commit.
func upgrade(dir, from string, log io.Writer) (*result, error) {
	lock, err := readLock(dir)
	if err != nil {
		return nil, err
	}
	if st, err := git(dir, "status", "--porcelain"); err != nil {
		return nil, err
	} else if st != "" {
		return nil, fmt.Errorf("%s has changes not committed; commit or stash them first, so the upgrade's own changes stand alone in git diff:\n%s", dir, st)
	}
	if len(lock.Conflicts) > 0 {
		return nil, fmt.Errorf("%s lists conflicts of the last upgrade not resolved: %s", lockName, strings.Join(lock.Conflicts, ", "))
	}
	tmp, err := os.MkdirTemp("", "cellgate-upgrade-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	repo := filepath.Join(tmp, "template.git")
	// git clone runs in tmp: a local path is made absolute first (a URL,
	// or anything not on disk, is git's to read).
	if _, err := os.Stat(from); err == nil {
		if from, err = filepath.Abs(from); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "upgrade: fetching %s\n", from)
	if _, err := git(tmp, "clone", "-q", "--bare", from, repo); err != nil {
		return nil, err
	}
	// A service made from a tree with changes not committed recorded
	// "+dirty": its base is the commit those changes were made on.
	baseRev := strings.TrimSuffix(lock.Version, "+dirty")
	if baseRev != lock.Version {
		fmt.Fprintf(log, "upgrade: the service was made from %s with changes not committed; taking that commit as the base\n", baseRev)
	}
	if _, err := git(repo, "cat-file", "-e", baseRev+"^{commit}"); err != nil {
		return nil, fmt.Errorf("the lock's version %s is not in %s's history: %v", baseRev, from, err)
	}
	head, err := git(repo, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	baseFiles, err := tree(repo, baseRev)
	if err != nil {
		return nil, err
	}
	theirFiles, err := tree(repo, head)
	if err != nil {
		return nil, err
	}
	bl, err := newBlobs(repo, lock.Module)
	if err != nil {
		return nil, err
	}
	defer bl.close()
	res := &result{from: baseRev, to: head}
	if old, err := os.ReadFile(filepath.Join(dir, "CHANGELOG.md")); err == nil {
		if _, ok := theirFiles["CHANGELOG.md"]; ok {
			if nw, err := bl.show(head, "CHANGELOG.md"); err == nil {
				res.changelog = changelogDiff(old, nw)
			}
		}
	}

	// Every file of either side, in name order.
	both := maps.Clone(baseFiles)
	maps.Copy(both, theirFiles)
	names := slices.Sorted(maps.Keys(both))
	files := map[string]string{}
	conflict := func(name, why string) {
		res.conflicts = append(res.conflicts, name+": "+why)
		lock.Conflicts = append(lock.Conflicts, name)
	}
	for _, name := range names {
		if !templateOwned(lock.UserOwned, name) {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(name))
		ours, err := os.ReadFile(path)
		missing := errors.Is(err, os.ErrNotExist)
		if err != nil && !missing {
			return nil, err
		}
		var base, theirs []byte
		_, inBase := baseFiles[name]
		mode, inTheirs := theirFiles[name]
		if inBase {
			if base, err = bl.show(baseRev, name); err != nil {
				return nil, err
			}
		}
		if inTheirs {
			if theirs, err = bl.show(head, name); err != nil {
				return nil, err
			}
			files[name] = hash(theirs)
		}
		switch {
		case !inTheirs: // deleted in the template
			switch {
			case missing:
			case bytes.Equal(ours, base):
				if err := os.Remove(path); err != nil {
					return nil, err
				}
				res.deleted = append(res.deleted, name)
			default:
				conflict(name, "deleted in the template, changed in the service (left in place)")
			}
		case missing && inBase:
			if !bytes.Equal(base, theirs) {
				conflict(name, "changed in the template, deleted in the service (left deleted)")
			}
		case missing:
			if err := writeFile(path, theirs, mode); err != nil {
				return nil, err
			}
			res.added = append(res.added, name)
		case bytes.Equal(ours, theirs):
		case inBase && bytes.Equal(ours, base):
			if err := writeFile(path, theirs, mode); err != nil {
				return nil, err
			}
			res.replaced = append(res.replaced, name)
		case inBase && bytes.Equal(base, theirs):
			// Only the service changed it; nothing to bring.
		default:
			// Both changed it, or both added it with different content
			// (merged against an empty base).
			merged, clean, err := mergeFile(tmp, ours, base, theirs, baseRev, head)
			if err != nil {
				conflict(name, err.Error()+" (left as it was)")
				continue
			}
			if err := writeFile(path, merged, mode); err != nil {
				return nil, err
			}
			if clean {
				res.merged = append(res.merged, name)
			} else {
				conflict(name, "conflict markers left in the file")
			}
		}
	}
	lock.Version = head
	lock.Files = files
	// A local change of a file the template no longer has is moot.
	lock.LocalChanges = slices.DeleteFunc(lock.LocalChanges, func(c LocalChange) bool {
		_, ok := files[c.Path]
		return !ok
	})
	if err := writeLock(dir, lock); err != nil {
		return nil, err
	}
	return res, nil
}

// tree lists the files of rev with their git mode.
func tree(repo, rev string) (map[string]string, error) {
	out, err := git(repo, "ls-tree", "-r", "-z", rev)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, rec := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		fields := strings.Fields(meta) // mode type object
		if len(fields) == 3 && fields[1] == "blob" {
			files[name] = fields[0]
		}
	}
	return files, nil
}

// blobs reads files of the template's repository through one
// git cat-file --batch process (one process per file is minutes for a
// thousand files on a busy machine).
type blobs struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	mod string
}

func newBlobs(repo, mod string) (*blobs, error) {
	cmd := exec.Command("git", "cat-file", "--batch")
	cmd.Dir = repo
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &blobs{cmd: cmd, in: in, out: bufio.NewReader(out), mod: mod}, nil
}

// show is the template's file name at rev with the module path rewritten
// to the service's, as make new writes it.
func (b *blobs) show(rev, name string) ([]byte, error) {
	if _, err := fmt.Fprintf(b.in, "%s:%s\n", rev, name); err != nil {
		return nil, err
	}
	header, err := b.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("git cat-file %s:%s: %v", short(rev), name, err)
	}
	f := strings.Fields(header) // object type size, or "... missing"
	if len(f) != 3 || f[1] != "blob" {
		return nil, fmt.Errorf("git cat-file %s:%s: %s", short(rev), name, strings.TrimSpace(header))
	}
	size, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, fmt.Errorf("git cat-file %s:%s: size %q: %v", short(rev), name, f[2], err)
	}
	content := make([]byte, size+1) // and the newline after it
	if _, err := io.ReadFull(b.out, content); err != nil {
		return nil, fmt.Errorf("git cat-file %s:%s: %v", short(rev), name, err)
	}
	return rewrite(content[:size], b.mod), nil
}

func (b *blobs) close() {
	b.in.Close()
	b.cmd.Wait()
}

// writeFile writes b at path with the git mode's permissions.
func writeFile(path string, b []byte, mode string) error {
	perm := os.FileMode(0o644)
	if mode == "100755" {
		perm = 0o755
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, perm); err != nil {
		return err
	}
	return os.Chmod(path, perm)
}

// mergeFile is git merge-file of ours, base and theirs: the merged
// content and whether it merged without conflicts. Binary files are not
// merged (an error).
func mergeFile(tmp string, ours, base, theirs []byte, baseRev, head string) ([]byte, bool, error) {
	for _, b := range [][]byte{ours, base, theirs} {
		if bytes.IndexByte(b, 0) >= 0 {
			return nil, false, errors.New("binary file changed on both sides")
		}
	}
	paths := make([]string, 3)
	for i, b := range [][]byte{ours, base, theirs} {
		paths[i] = filepath.Join(tmp, fmt.Sprintf("merge.%d", i))
		if err := os.WriteFile(paths[i], b, 0o600); err != nil {
			return nil, false, err
		}
	}
	cmd := exec.Command("git", "merge-file", "-p",
		"-L", "service", "-L", "template "+short(baseRev), "-L", "template "+short(head),
		paths[0], paths[1], paths[2])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, true, nil
	case errors.As(err, &exit) && exit.ExitCode() > 0 && exit.ExitCode() < 128:
		return out, false, nil // the number of conflicts
	default:
		return nil, false, fmt.Errorf("git merge-file: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
}

// changelogDiff is what nw (the newer template's CHANGELOG.md) has that
// old (the service's) has not: whole "## " sections old lacks, and of a
// section both have (such as [Unreleased]) the lines old's lacks, under
// their "###" headings.
func changelogDiff(old, nw []byte) string {
	oldSecs := map[string]section{}
	for _, s := range sections(old) {
		oldSecs[s.head] = s
	}
	var b strings.Builder
	for _, s := range sections(nw) {
		if s.head == "" {
			continue // the preamble
		}
		prev, ok := oldSecs[s.head]
		if !ok {
			b.WriteString(s.head + "\n" + strings.Join(s.lines, "\n") + "\n")
			continue
		}
		have := map[string]bool{}
		for _, l := range prev.lines {
			have[l] = true
		}
		var out []string
		sub := ""
		for _, l := range s.lines {
			switch {
			case strings.HasPrefix(l, "### "):
				sub = l
			case strings.TrimSpace(l) == "" || have[l]:
			default:
				if sub != "" {
					out = append(out, sub)
					sub = ""
				}
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			b.WriteString(s.head + "\n" + strings.Join(out, "\n") + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

type section struct {
	head  string
	lines []string
}

// sections splits a changelog at its "## " headings, in order; the first
// is the preamble, with no heading.
func sections(b []byte) []section {
	var order []section
	cur := section{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "## ") {
			order = append(order, cur)
			cur = section{head: l}
			continue
		}
		cur.lines = append(cur.lines, l)
	}
	return append(order, cur)
}
