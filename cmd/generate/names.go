package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
)

// reservedJobNames are identifiers the jobkinds template declares itself:
// a kind whose Go name is one of them would redeclare it.
var reservedJobNames = map[string]string{"Kinds": "the list of every kind"}

// reservedArgNames are the methods the template gives every args struct: an
// arg field of that Go name would collide with the method.
var reservedArgNames = map[string]string{"JobSpec": "the generated method JobSpec", "UniqueKey": "the generated method UniqueKey"}

// checkNames refuses a spec whose names collide after the mapping to Go
// identifiers (gen/ would not compile), naming both spec paths.
func checkNames(cfg config.Config) error {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	// Package-level identifiers of gen/jobkinds: one var per kind (GoName),
	// one type per kind (GoName+"Args"), and Kinds.
	owner := map[string]string{}
	claim := func(ident, path string) {
		if why, ok := reservedJobNames[ident]; ok {
			fail("%s: maps to the Go name %s, which is %s in gen/jobkinds; rename the kind", path, ident, why)
			return
		}
		if prev, ok := owner[ident]; ok {
			fail("%s: maps to the Go name %s, as %s does; rename one of them", path, ident, prev)
			return
		}
		owner[ident] = path
	}
	for i, k := range cfg.Jobs.Kinds {
		path := fmt.Sprintf("jobs.kinds[%d].name", i)
		claim(goName(k.Name), path)
		claim(goName(k.Name)+"Args", path+" (its args type)")
		fields := map[string]string{}
		for j, a := range k.Args {
			apath := fmt.Sprintf("jobs.kinds[%d].args[%d].name", i, j)
			g := goName(a.Name)
			if why, ok := reservedArgNames[g]; ok {
				fail("%s: %q maps to the Go field %s, which collides with %s of %sArgs; rename the arg", apath, a.Name, g, why, goName(k.Name))
				continue
			}
			if prev, ok := fields[g]; ok {
				fail("%s: %q maps to the Go field %s, as %s does; rename one of them", apath, a.Name, g, prev)
				continue
			}
			fields[g] = apath
		}
	}

	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return fmt.Errorf("%s", strings.Join(errs, "\n"))
}
