package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime/idempotency"
	"github.com/cellgate/cellgate/internal/shardmap"
	"github.com/cellgate/cellgate/internal/shards"
	cgsql "github.com/cellgate/cellgate/sql"
)

// Schema names: whose migrations a target holds.
const (
	schemaApp  = "app"  // sql/migrations, table schema_migrations
	schemaJobs = "jobs" // internal/jobs/pgjobs/migrations, table cellgate_jobs_schema_migrations
	// schemaTenants is the live tenant table (internal/plans/migrations,
	// table cellgate_tenants_schema_migrations), on the control database
	// when tenancy is on.
	schemaTenants = "plans"
	// schemaIdempotency: internal/runtime/idempotency/migrations, table
	// cellgate_idempotency_schema_migrations, on every shard when a route
	// is idempotent.
	schemaIdempotency = "idempotency"
	// schemaShardMap is the cell's live shard map
	// (internal/shardmap/migrations, table
	// cellgate_shardmap_schema_migrations), on the control database.
	schemaShardMap = "shardmap"
)

// migrationTarget is one set of migration files on one database.
type migrationTarget struct {
	db     string // "control", "shard-0", …
	dsn    string
	schema string // schemaApp, schemaJobs, schemaTenants, schemaIdempotency or schemaShardMap
	files  dbmigrate.Files
}

// migrationTargets lists where the migrations of the given schemas go, in
// order: the control database first, then the cell's shards in spec order,
// the app's files before the job backend's on each. The app's go where
// database.app_migrations says; the job backend's go to the control
// database with jobs.backend = "postgres", and to every shard with
// jobs.postgres.shard_local too; the idempotency keys' go to every shard
// when a route is idempotent, after the app's.
func migrationTargets(cfg config.Config, set *shards.Set, schemas ...string) []migrationTarget {
	want := map[string]bool{}
	for _, s := range schemas {
		want[s] = true
	}
	jobsOn := want[schemaJobs] && cfg.Jobs.Backend == "postgres"
	idemOn := want[schemaIdempotency] && cfg.IdempotentRoutes()
	var out []migrationTarget
	add := func(db, dsn string, app, jobs bool) {
		if app && want[schemaApp] {
			out = append(out, migrationTarget{db, dsn, schemaApp, cgsql.Files})
		}
		if idemOn && db != shards.ControlName {
			out = append(out, migrationTarget{db, dsn, schemaIdempotency, idempotency.Files})
		}
		if jobs && jobsOn {
			out = append(out, migrationTarget{db, dsn, schemaJobs, pgjobs.Files})
		}
	}
	add(shards.ControlName, set.ControlDSN(), cfg.Database.AppMigrationsOnControl(), true)
	if want[schemaTenants] && cfg.Tenancy.Enabled {
		out = append(out, migrationTarget{shards.ControlName, set.ControlDSN(), schemaTenants, plans.Files})
	}
	if want[schemaShardMap] {
		out = append(out, migrationTarget{shards.ControlName, set.ControlDSN(), schemaShardMap, shardmap.Files})
	}
	for _, sh := range set.Shards() {
		add(sh.Name, sh.DSN, cfg.Database.AppMigrationsOnShards(), cfg.Jobs.Postgres.ShardLocal)
	}
	return out
}

// repairHint is what an operator runs after a migration failed in a
// database: undo what the file applied, fix it, force the version before
// it, start again.
func repairHint(t migrationTarget, e *dbmigrate.Error) string {
	file := cmp.Or(e.File, fmt.Sprintf("version %d", e.Version))
	schema := ""
	if t.schema != schemaApp {
		schema = " -schema " + t.schema
	}
	return fmt.Sprintf("repair: undo what %s applied on %s, fix the file, run `server migrate -db %s%s force %d`, then restart (or `server migrate up`)",
		file, t.db, t.db, schema, e.Previous)
}

// describeFailure is a failed migration in one line: database, file,
// PostgreSQL's error, the remedy.
func describeFailure(t migrationTarget, err error) string {
	if e, ok := errors.AsType[*dbmigrate.Error](err); ok {
		return fmt.Sprintf("%s: %v; %s", t.db, e, repairHint(t, e))
	}
	return fmt.Sprintf("%s: %v", t.db, err)
}

// migrationProgress is the serve command's view of the app's migrations,
// behind the "migrations" readiness check. Safe for concurrent use: the
// migrating goroutine writes it, /readyz reads it.
type migrationProgress struct {
	mu      sync.Mutex
	done    bool
	failed  string // set once a migration failed in a database; final
	waiting string // what the run waits for now
}

// check is the readiness check: nil once every database is migrated.
func (p *migrationProgress) check(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.done:
		return nil
	case p.failed != "":
		return errors.New(p.failed)
	case p.waiting != "":
		return errors.New(p.waiting)
	}
	return errors.New("the app's migrations have not started")
}

// applied reports whether every database is migrated.
func (p *migrationProgress) applied() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *migrationProgress) set(f func(p *migrationProgress)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// run applies each target's files in order. While a database cannot be
// reached it retries with backoff (the database may be starting); a
// migration that fails in a database (PostgreSQL rejected the file, or the
// database is dirty) stops the run for good: retrying cannot fix it, so
// the cell stays unready, and the log and /readyz say which database, which
// file, PostgreSQL's error and how to repair it. run returns nil once
// every target is migrated.
func (p *migrationProgress) run(ctx context.Context, targets []migrationTarget, log *slog.Logger, sleep func(context.Context, time.Duration) error) error {
	for _, t := range targets {
		delay := 200 * time.Millisecond
		p.set(func(p *migrationProgress) {
			p.waiting = fmt.Sprintf("applying the %s migrations to %s", t.schema, t.db)
		})
		for {
			err := t.files.Up(ctx, t.dsn)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil {
				break
			}
			if e, ok := errors.AsType[*dbmigrate.Error](err); ok {
				msg := describeFailure(t, err)
				p.set(func(p *migrationProgress) { p.failed = msg })
				log.Error("migration failed; the cell stays unready until it is repaired",
					"database", t.db, "schema", t.schema, "file", e.File, "version", e.Version,
					"error", e.Err.Error(), "repair", repairHint(t, e))
				return err
			}
			msg := fmt.Sprintf("%s unreachable, retrying the %s migrations: %v", t.db, t.schema, err)
			p.set(func(p *migrationProgress) { p.waiting = msg })
			log.Warn("migrations: database unreachable; retrying", "database", t.db, "schema", t.schema, "error", err.Error(), "in", delay.String())
			if err := sleep(ctx, delay); err != nil {
				return err
			}
			delay = min(2*delay, 5*time.Second)
		}
	}
	p.set(func(p *migrationProgress) { p.done = true })
	log.Info("migrations applied", "databases", len(targets))
	return nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// migrateHelp is what `server migrate -h` prints under its usage line.
const migrateHelp = `  status     each database's version of each schema: up to date, behind (pending files),
             DIRTY (a file failed: the remedy is printed) or unreachable; exit 1 if any is
             dirty or unreachable
  up         apply every pending file (the default)
  down N     roll back the newest N files
  force V    record version V and clear the dirty flag, running no file (-1: none applied);
             after a failed file: undo what it applied, fix it, force the version before it

The app's migrations (sql/migrations) go where database.app_migrations says (shards by
default); the job backend's (jobs.backend = "postgres") to the control database, and with
jobs.postgres.shard_local to every shard; the idempotency keys' table (a route marked
idempotent) to every shard. down and force change the app's schema unless -schema jobs
or -schema idempotency is given, and every database unless -db names one.
`

// migrateSynopsis follows `server migrate [-config cell.json]` in its usage.
const migrateSynopsis = "[-db NAME] [-schema app|jobs|plans|idempotency] [status | up | down N | force V]"

// migrateCommand adds the `migrate` subcommand's flags to fs and returns
// the command. Flags may come before or after the action: run parses those
// before it, the command those after.
func migrateCommand(fs *flag.FlagSet) func(context.Context, invocation) error {
	dbName := fs.String("db", "", "only this database (control, shard-0, …)")
	schema := fs.String("schema", "", "only this schema: app, jobs, plans, idempotency or shardmap (default: all for status and up, app for down and force)")
	return func(ctx context.Context, inv invocation) error {
		rest := inv.args
		action, n := "up", 0
		if len(rest) > 0 {
			action, rest = rest[0], rest[1:]
		}
		switch action {
		case "status", "up":
		case "down", "force":
			if len(rest) == 0 {
				return usageError{msg: fmt.Sprintf("migrate %s needs a number", action)}
			}
			v, err := strconv.Atoi(rest[0])
			if err != nil || (action == "down" && v < 1) || v < -1 {
				return usageError{msg: fmt.Sprintf("migrate %s %s: want a number (down: >= 1, force: >= -1)", action, rest[0])}
			}
			n, rest = v, rest[1:]
		default:
			return usageError{msg: fmt.Sprintf("migrate: unknown action %q; want status, up, down N or force V", action)}
		}
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{msg: err.Error()}
		}
		if fs.NArg() > 0 {
			return usageError{msg: fmt.Sprintf("migrate %s: unexpected arguments %q", action, fs.Args())}
		}
		schemas := []string{schemaApp, schemaJobs, schemaTenants, schemaIdempotency, schemaShardMap}
		switch {
		case slices.Contains(schemas, *schema):
			schemas = []string{*schema}
		case *schema != "":
			return usageError{msg: fmt.Sprintf("migrate: -schema %q: want app, jobs, plans, idempotency or shardmap", *schema)}
		case action == "down" || action == "force":
			schemas = []string{schemaApp}
		}

		cfg, err := inv.cfg()
		if err != nil {
			return err
		}
		set, err := shards.OpenCell(ctx, cfg.Database, cfg.Cells, cfg.Server.Cell, os.Getenv)
		if err != nil {
			return err
		}
		defer set.Close()
		targets, err := filterTargets(migrationTargets(cfg, set, schemas...), *dbName)
		if err != nil {
			return err
		}
		return migrateAction(ctx, action, n, targets, inv.stdout)
	}
}

// filterTargets keeps the targets of database db ("" keeps all).
func filterTargets(all []migrationTarget, db string) ([]migrationTarget, error) {
	if db == "" {
		if len(all) == 0 {
			return nil, errors.New("migrate: no database gets these migrations (see database.app_migrations and jobs.backend)")
		}
		return all, nil
	}
	var names []string
	var kept []migrationTarget
	for _, t := range all {
		if t.db == db {
			kept = append(kept, t)
		}
		if len(names) == 0 || names[len(names)-1] != t.db {
			names = append(names, t.db)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("migrate: -db %q gets none of these migrations; databases: %s", db, strings.Join(names, ", "))
	}
	return kept, nil
}

// migrateAction runs action on every target, then prints every target's
// status. A failure on one database does not stop the others: status shows
// where each stands. The error names every database that failed.
func migrateAction(ctx context.Context, action string, n int, targets []migrationTarget, out io.Writer) error {
	var failed []string
	if action != "status" {
		for _, t := range targets {
			var err error
			switch action {
			case "up":
				err = t.files.Up(ctx, t.dsn)
			case "down":
				err = t.files.Steps(ctx, t.dsn, -n)
			case "force":
				err = t.files.Force(ctx, t.dsn, n)
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s %s: %v", t.db, t.schema, err))
			}
		}
	}
	rows := make([]statusRow, len(targets))
	for i, t := range targets {
		st, err := t.files.Status(ctx, t.dsn)
		rows[i] = statusRow{target: t, state: st, err: err}
	}
	bad := writeStatus(out, rows)
	if len(failed) > 0 {
		return fmt.Errorf("migrate %s failed on %d of %d: %s", action, len(failed), len(targets), strings.Join(failed, "; "))
	}
	if bad > 0 {
		return fmt.Errorf("migrate %s: %d of %d need attention (dirty or unreachable)", action, bad, len(targets))
	}
	return nil
}

// statusRow is one line of `server migrate status`.
type statusRow struct {
	target migrationTarget
	state  dbmigrate.State
	err    error // reading the version failed
}

// writeStatus prints one aligned line per target and a closing line when
// databases of one schema stand at different versions. It returns how many
// targets are dirty or unreachable.
func writeStatus(out io.Writer, rows []statusRow) (bad int) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tSCHEMA\tVERSION\tSTATE")
	versions := map[string]map[string]bool{} // schema → versions seen
	for _, r := range rows {
		state, isBad := describeState(r)
		if isBad {
			bad++
		}
		ver := "-"
		if r.err == nil {
			if r.state.Applied {
				ver = strconv.FormatUint(uint64(r.state.Version), 10)
			}
			ver += "/" + strconv.FormatUint(uint64(r.state.Latest), 10)
			if versions[r.target.schema] == nil {
				versions[r.target.schema] = map[string]bool{}
			}
			versions[r.target.schema][ver] = true
		} else {
			ver = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.target.db, r.target.schema, ver, state)
	}
	tw.Flush()
	for _, s := range []string{schemaApp, schemaJobs, schemaTenants, schemaIdempotency, schemaShardMap} {
		if len(versions[s]) > 1 {
			fmt.Fprintf(out, "the %s schema is not at one version on every database: apply or repair the ones above that are not up to date\n", s)
		}
	}
	return bad
}

// describeState is a row's STATE column and whether it needs an operator.
func describeState(r statusRow) (string, bool) {
	st := r.state
	switch {
	case r.err != nil:
		return "unreachable: " + r.err.Error(), true
	case st.Dirty:
		e := &dbmigrate.Error{Version: st.Version, File: st.File, Previous: st.Previous}
		file := cmp.Or(st.File, fmt.Sprintf("version %d", st.Version))
		return fmt.Sprintf("DIRTY: %s failed; %s", file, repairHint(r.target, e)), true
	case st.Applied && st.Version > st.Latest:
		return fmt.Sprintf("ahead: version %d has no file in this binary (a newer release migrated it)", st.Version), false
	case len(st.Pending) > 0:
		return fmt.Sprintf("behind: %d pending (%s)", len(st.Pending), strings.Join(st.Pending, ", ")), false
	}
	return "up to date", false
}
