package configload

import (
	"fmt"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/schema"
)

// reservedJobNames are identifiers the jobkinds template declares itself:
// a kind whose Go name is one of them would redeclare it.
var reservedJobNames = map[string]string{
	"Kinds":           "the list of every kind",
	"Workers":         "the interface of the app's workers",
	"RegisterWorkers": "the function that registers them",
}

// reservedArgNames are the methods the template gives every args struct: an
// arg field of that Go name would collide with the method.
var reservedArgNames = map[string]string{"JobSpec": "the generated method JobSpec", "UniqueKey": "the generated method UniqueKey"}

// nameRules refuse a config whose names collide after the mapping to Go
// identifiers (config.GoName), naming both spec paths: the generator would
// render gen/ that does not compile. They are in the one validation path,
// so `server check` refuses such a per-cell file as generate refuses the
// spec.
func nameRules(cfg config.Config) []schema.Issue {
	var errs []schema.Issue
	fail := func(format string, args ...any) {
		path, msg := splitPath(fmt.Sprintf(format, args...))
		errs = append(errs, schema.Issue{Path: path, Msg: msg})
	}

	// Package-level identifiers of gen/jobkinds: one var per kind (GoName),
	// one type per kind (GoName+"Args"), Kinds, Workers and RegisterWorkers.
	owner := map[string]string{}
	claim := func(ident, path string) bool {
		if why, ok := reservedJobNames[ident]; ok {
			fail("%s: maps to the Go name %s, which is %s in gen/jobkinds; rename the kind", path, ident, why)
			return false
		}
		if prev, ok := owner[ident]; ok {
			fail("%s: maps to the Go name %s, as %s does; rename one of them", path, ident, prev)
			return false
		}
		owner[ident] = path
		return true
	}
	for i, k := range cfg.Jobs.Kinds {
		path := fmt.Sprintf("jobs.kinds[%d].name", i)
		// A kind whose name collides has an args type that collides too:
		// one message says it.
		if claim(config.GoName(k.Name), path) {
			claim(config.GoName(k.Name)+"Args", path+" (its args type)")
		}
		fields := map[string]string{}
		for j, a := range k.Args {
			apath := fmt.Sprintf("jobs.kinds[%d].args[%d].name", i, j)
			g := config.GoName(a.Name)
			if why, ok := reservedArgNames[g]; ok {
				fail("%s: %q maps to the Go field %s, which collides with %s of %sArgs; rename the arg", apath, a.Name, g, why, config.GoName(k.Name))
				continue
			}
			if prev, ok := fields[g]; ok {
				fail("%s: %q maps to the Go field %s, as %s does; rename one of them", apath, a.Name, g, prev)
				continue
			}
			fields[g] = apath
		}
	}

	return errs
}
