package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// runCheck is `newservice check` (make upgrade-check): every template-owned
// file is the template's version the lock records, or is listed in the
// lock's local_changes with a reason; no conflict of an upgrade is left.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("newservice check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".", "root of the service (holds cellgate.lock)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if _, err := os.Stat(filepath.Join(*dir, lockName)); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stdout, "upgrade-check: no %s here: this is the template itself (or not a service made from it); nothing to check\n", lockName)
		return 0
	}
	problems, err := check(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "upgrade-check:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, "upgrade-check:", p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "upgrade-check: %d template-owned files differ from the template without a reason; undo the change, or record it in %s's local_changes as {\"path\": ..., \"reason\": ...}\n", len(problems), lockName)
		return 1
	}
	fmt.Fprintln(stdout, "upgrade-check: every template-owned file is the template's or has a recorded reason")
	return 0
}

// check lists the template-owned files of the service at dir that differ
// from the lock without a recorded reason, and the unresolved conflicts.
func check(dir string) ([]string, error) {
	lock, err := readLock(dir)
	if err != nil {
		return nil, err
	}
	reason := map[string]string{}
	var problems []string
	for _, c := range lock.LocalChanges {
		switch {
		case c.Reason == "":
			problems = append(problems, fmt.Sprintf("%s: local_changes entry with no reason", c.Path))
		case lock.Files[c.Path] == "":
			problems = append(problems, fmt.Sprintf("%s: local_changes names a file that is not template-owned", c.Path))
		}
		reason[c.Path] = c.Reason
	}
	for _, c := range lock.Conflicts {
		problems = append(problems, fmt.Sprintf("%s: conflict of the last upgrade not resolved (remove it from the lock's conflicts once it is)", c))
	}
	for _, name := range slices.Sorted(maps.Keys(lock.Files)) {
		if reason[name] != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s: template-owned file deleted", name))
		case err != nil:
			return nil, err
		case hash(b) != lock.Files[name]:
			problems = append(problems, fmt.Sprintf("%s: differs from the template's version", name))
		}
	}
	return problems, nil
}
