package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The spec's database.tenant_tables is the one list of the app's tables of
// tenant rows (slotmove moves exactly those); the migrations must agree
// with it. checkTenantTables reads the tables the migrations leave behind
// and checks both ways: every table with tenant_id and slot columns is
// declared, every declared table exists with both columns, and a declared
// table comes after the declared tables it references (slotmove copies in
// that order and deletes in reverse).
//
// The reader understands the DDL a migration usually holds: CREATE TABLE
// (columns and REFERENCES), ALTER TABLE … ADD/DROP/RENAME COLUMN, ALTER
// TABLE … RENAME TO and DROP TABLE, in version order. Other statements are
// skipped; a table created some other way (CREATE TABLE … AS, PARTITION OF,
// a function) is not seen.

// sqlTable is what the reader knows of one table.
type sqlTable struct {
	cols map[string]bool
	refs []string // tables it references
	pk   []string // primary key columns
	// ident is the replica identity: "" (default: the primary key),
	// "full", "nothing", or the columns of the index it uses, as
	// "index:" + the index name.
	ident string
}

// sqlIndex is a unique index the migrations create.
type sqlIndex struct {
	table string
	cols  []string
}

// checkTenantTables checks declared (the spec's list) against the up files
// in dir. It returns the problems that must be fixed as an error and the
// doubtful cases as warnings.
func checkTenantTables(dir string, declared []string) (warns []string, err error) {
	tables, indexes, err := readMigrationTables(dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	pos := map[string]int{}
	for i, name := range declared {
		at := fmt.Sprintf("database.tenant_tables[%d]", i)
		if j, dup := pos[name]; dup {
			problems = append(problems, fmt.Sprintf("%s: %s is already database.tenant_tables[%d]", at, name, j))
			continue
		}
		pos[name] = i
		t, ok := tables[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s is not a table of %s", at, name, dir))
			continue
		}
		for _, col := range []string{"tenant_id", "slot"} {
			if !t.cols[col] {
				problems = append(problems, fmt.Sprintf("%s: %s has no %s column in %s; a tenant table needs tenant_id and slot", at, name, col, dir))
			}
		}
		if t.cols["slot"] && !identityCoversSlot(t, indexes) {
			problems = append(problems, fmt.Sprintf("%s: %s has no replica identity covering slot in %s (online slot moves stream its UPDATEs and DELETEs filtered on slot, and PostgreSQL refuses them without one); add a migration: %s",
				at, name, dir, identityFix(name, t)))
		}
	}
	for i, name := range declared {
		t, ok := tables[name]
		if !ok {
			continue
		}
		for _, ref := range t.refs {
			if j, ok := pos[ref]; ok && j > i {
				problems = append(problems, fmt.Sprintf("database.tenant_tables[%d]: %s references %s, which must come before it (parents first)", i, name, ref))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		t := tables[name]
		_, isDeclared := pos[name]
		switch {
		case isDeclared:
		case t.cols["tenant_id"] && t.cols["slot"]:
			problems = append(problems, fmt.Sprintf("%s: table %s has tenant_id and slot columns but is not in database.tenant_tables; add it (parents before children) so slotmove moves its rows", dir, name))
		case t.cols["tenant_id"]:
			warns = append(warns, fmt.Sprintf("%s: table %s has tenant_id but no slot column: its rows cannot move with their tenant's slot", dir, name))
		}
	}
	if len(problems) > 0 {
		return warns, fmt.Errorf("tenant tables:\n%s", indent(strings.Join(problems, "\n")))
	}
	return warns, nil
}

// identityCoversSlot says whether t's replica identity includes slot:
// FULL, or a unique index with slot among its columns (the default, the
// primary key, covers it only if slot is in the key).
func identityCoversSlot(t *sqlTable, indexes map[string]*sqlIndex) bool {
	switch {
	case t.ident == "full":
		return true
	case t.ident == "":
		return slices.Contains(t.pk, "slot")
	case strings.HasPrefix(t.ident, "index:"):
		ix := indexes[strings.TrimPrefix(t.ident, "index:")]
		return ix != nil && slices.Contains(ix.cols, "slot")
	}
	return false
}

// identityFix is the DDL that gives t a replica identity covering slot.
func identityFix(name string, t *sqlTable) string {
	cols := append(slices.Clone(t.pk), "slot")
	if len(t.pk) == 0 {
		cols = []string{"tenant_id", "id", "slot"}
	}
	idx := name + "_replica_identity"
	return fmt.Sprintf("CREATE UNIQUE INDEX %s ON %s (%s); ALTER TABLE %s REPLICA IDENTITY USING INDEX %s;",
		idx, name, strings.Join(cols, ", "), name, idx)
}

// readMigrationTables replays the up files of dir in version order.
func readMigrationTables(dir string) (map[string]*sqlTable, map[string]*sqlIndex, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, nil, err
	}
	version := func(p string) uint64 {
		base := filepath.Base(p)
		digits := base[:len(base)-len(strings.TrimLeft(base, "0123456789"))]
		n, _ := strconv.ParseUint(digits, 10, 64)
		return n
	}
	sort.Slice(paths, func(i, j int) bool { return version(paths[i]) < version(paths[j]) })
	tables, indexes := map[string]*sqlTable{}, map[string]*sqlIndex{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		for _, stmt := range splitStatements(string(raw)) {
			applyStatement(tables, indexes, stmt)
		}
	}
	return tables, indexes, nil
}

var (
	reCreate  = regexp.MustCompile(`^create\s+(?:(?:global|local)\s+)?(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?([\w.]+)\s*\((.*)\)`)
	reAlter   = regexp.MustCompile(`^alter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([\w.]+)\s+(.*)$`)
	reDrop    = regexp.MustCompile(`^drop\s+table\s+(?:if\s+exists\s+)?(.*?)(?:\s+(?:cascade|restrict))?$`)
	reAdd     = regexp.MustCompile(`^add\s+(?:column\s+)?(?:if\s+not\s+exists\s+)?(\w+)`)
	reDropCol = regexp.MustCompile(`^drop\s+(?:column\s+)?(?:if\s+exists\s+)?(\w+)`)
	reRenCol  = regexp.MustCompile(`^rename\s+(?:column\s+)?(\w+)\s+to\s+(\w+)$`)
	reRenTab  = regexp.MustCompile(`^rename\s+to\s+(\w+)$`)
	reRefs    = regexp.MustCompile(`\breferences\s+([\w.]+)`)
	rePK      = regexp.MustCompile(`^(?:constraint\s+\w+\s+)?primary\s+key\s*\(([^)]*)\)`)
	reUnique  = regexp.MustCompile(`^create\s+unique\s+index\s+(?:concurrently\s+)?(?:if\s+not\s+exists\s+)?([\w.]+)\s+on\s+(?:only\s+)?([\w.]+)\s*(?:using\s+\w+\s*)?\(([^)]*)\)`)
	reDropIdx = regexp.MustCompile(`^drop\s+index\s+(?:concurrently\s+)?(?:if\s+exists\s+)?(.*?)(?:\s+(?:cascade|restrict))?$`)
	reIdent   = regexp.MustCompile(`^replica\s+identity\s+(full|default|nothing|using\s+index\s+([\w.]+))$`)
	// Items of a CREATE TABLE or actions of an ALTER TABLE that are not
	// columns.
	reNotColumn = regexp.MustCompile(`^(?:constraint|primary|unique|foreign|check|exclude|like)\b`)
)

// applyStatement updates tables with one statement (lower case, comments
// removed, whitespace collapsed).
func applyStatement(tables map[string]*sqlTable, indexes map[string]*sqlIndex, stmt string) {
	if m := reUnique.FindStringSubmatch(stmt); m != nil {
		ix := &sqlIndex{table: bare(m[2])}
		for _, c := range splitTop(m[3], ',') {
			if f := strings.Fields(c); len(f) > 0 {
				ix.cols = append(ix.cols, bare(f[0]))
			}
		}
		indexes[bare(m[1])] = ix
		return
	}
	if m := reDropIdx.FindStringSubmatch(stmt); m != nil {
		for _, name := range splitTop(m[1], ',') {
			delete(indexes, bare(name))
		}
		return
	}
	if m := reCreate.FindStringSubmatch(stmt); m != nil {
		t := &sqlTable{cols: map[string]bool{}}
		for _, item := range splitTop(m[2], ',') {
			if pk := rePK.FindStringSubmatch(item); pk != nil {
				for _, c := range splitTop(pk[1], ',') {
					t.pk = append(t.pk, bare(c))
				}
			}
			if !reNotColumn.MatchString(item) {
				if f := strings.Fields(item); len(f) > 0 {
					t.cols[f[0]] = true
					if strings.Contains(item, "primary key") {
						t.pk = []string{f[0]}
					}
				}
			}
			for _, r := range reRefs.FindAllStringSubmatch(item, -1) {
				t.refs = append(t.refs, bare(r[1]))
			}
		}
		tables[bare(m[1])] = t
		return
	}
	if m := reAlter.FindStringSubmatch(stmt); m != nil {
		name := bare(m[1])
		t := tables[name]
		if t == nil {
			return
		}
		for _, action := range splitTop(m[2], ',') {
			for _, r := range reRefs.FindAllStringSubmatch(action, -1) {
				t.refs = append(t.refs, bare(r[1]))
			}
			switch {
			case reIdent.MatchString(action):
				switch c := reIdent.FindStringSubmatch(action); {
				case c[2] != "":
					t.ident = "index:" + bare(c[2])
				case c[1] == "default":
					t.ident = ""
				default:
					t.ident = c[1]
				}
			case strings.HasPrefix(action, "add ") && !reNotColumn.MatchString(strings.TrimPrefix(action, "add ")):
				if c := reAdd.FindStringSubmatch(action); c != nil {
					t.cols[c[1]] = true
				}
			case strings.HasPrefix(action, "drop ") && !strings.HasPrefix(action, "drop constraint"):
				if c := reDropCol.FindStringSubmatch(action); c != nil {
					delete(t.cols, c[1])
				}
			case reRenTab.MatchString(action):
				delete(tables, name)
				name = reRenTab.FindStringSubmatch(action)[1]
				tables[name] = t
			case reRenCol.MatchString(action):
				c := reRenCol.FindStringSubmatch(action)
				if t.cols[c[1]] {
					delete(t.cols, c[1])
					t.cols[c[2]] = true
				}
			}
		}
		return
	}
	if m := reDrop.FindStringSubmatch(stmt); m != nil {
		for _, name := range splitTop(m[1], ',') {
			delete(tables, bare(name))
		}
	}
}

// bare drops quotes and a public. schema.
func bare(name string) string {
	name = strings.ReplaceAll(strings.TrimSpace(name), `"`, "")
	return strings.TrimPrefix(name, "public.")
}

// splitStatements splits SQL into statements on top-level semicolons,
// skipping comments, quoted strings and dollar-quoted bodies; each
// statement comes back lower case with whitespace collapsed.
func splitStatements(sql string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if s := strings.Join(strings.Fields(strings.ToLower(b.String())), " "); s != "" {
			out = append(out, s)
		}
		b.Reset()
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j
			}
			b.WriteByte(' ')
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 3
			}
			b.WriteByte(' ')
		case c == '\'':
			// A literal matters to no rule here: keep a placeholder.
			j := i + 1
			for j < len(sql) && (sql[j] != '\'' || (j+1 < len(sql) && sql[j+1] == '\'')) {
				if sql[j] == '\'' {
					j++
				}
				j++
			}
			i = j
			b.WriteString("''")
		case c == '$':
			if tag := dollarTag(sql[i:]); tag != "" {
				j := strings.Index(sql[i+len(tag):], tag)
				if j < 0 {
					i = len(sql)
				} else {
					i += len(tag) + j + len(tag) - 1
				}
				b.WriteString("$$")
				continue
			}
			b.WriteByte(c)
		case c == ';':
			flush()
		default:
			b.WriteByte(c)
		}
	}
	flush()
	return out
}

var reDollarTag = regexp.MustCompile(`^\$[A-Za-z_]*\$`)

func dollarTag(s string) string { return reDollarTag.FindString(s) }

// splitTop splits s on sep outside parentheses and trims the parts.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}
