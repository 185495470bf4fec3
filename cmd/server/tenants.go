package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/plans"
)

const tenantsSynopsis = "[-by NAME] list | get TENANT | set TENANT ASSIGNMENT... | unset TENANT NAME..."

const tenantsHelp = `Read and change the cell's tenant table (cellgate_tenants in the control
database; docs/plans.md). Every process of the cell applies a change within
2 seconds, without a restart. set and unset print what is then in force.

  list                       every tenant with a row: plan, overrides, who, when
  get TENANT                 the tenant's row and its limits in force
  set TENANT plan=NAME       put the tenant on a plan of the spec
  set TENANT FIELD=VALUE     override one limit (enforced)
  set TENANT shadow=FIELD    put FIELD's override in shadow mode: counted, not enforced
  set TENANT enforce=FIELD   enforce FIELD's override again
  unset TENANT plan          back to the token's plan or the default plan
  unset TENANT FIELD         drop FIELD's override

FIELD is one of max_concurrent_requests, max_db_connections,
rate_per_second, burst, jobs.max_concurrent, jobs.weight. Assignments
combine: set acme max_concurrent_requests=2 shadow=max_concurrent_requests
rolls out a tighter cap in shadow mode first.
`

// tenantsCommand is `server tenants`.
func tenantsCommand(fs *flag.FlagSet) func(context.Context, invocation) error {
	by := fs.String("by", defaultActor(), "who makes the change (recorded as updated_by)")
	return func(ctx context.Context, inv invocation) error {
		if len(inv.args) == 0 {
			return usageError{msg: "tenants: want an action: list, get, set or unset"}
		}
		action, args := inv.args[0], inv.args[1:]
		switch action {
		case "list":
			if len(args) != 0 {
				return usageError{msg: fmt.Sprintf("tenants list: unexpected arguments %q", args)}
			}
		case "get":
			if len(args) != 1 {
				return usageError{msg: "tenants get: want one TENANT"}
			}
		case "set", "unset":
			if len(args) < 2 {
				return usageError{msg: fmt.Sprintf("tenants %s: want TENANT and at least one %s", action, map[string]string{"set": "ASSIGNMENT", "unset": "NAME"}[action])}
			}
		default:
			return usageError{msg: fmt.Sprintf("tenants: unknown action %q; want list, get, set or unset", action)}
		}
		var change plans.Change
		var err error
		switch action {
		case "set":
			change, err = parseSet(args[1:])
		case "unset":
			change, err = parseUnset(args[1:])
		}
		if err != nil {
			return usageError{msg: "tenants " + action + ": " + err.Error()}
		}
		cfg, err := inv.cfg()
		if err != nil {
			return err
		}
		cat, err := plans.NewCatalog(cfg)
		if err != nil {
			return err
		}
		pool, err := controlPool(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		// The tenant table's own schema, applied like the job runtime's.
		if err := plans.Migrate(ctx, pool.Config().ConnString()); err != nil {
			return fmt.Errorf("tenant table migrations: %w", err)
		}
		switch action {
		case "list":
			st := plans.NewStore(pool, cat, plans.Options{Log: inv.log})
			if err := st.Load(ctx); err != nil {
				return err
			}
			return printList(inv.stdout, st.Snapshot())
		case "get":
			st := plans.NewStore(pool, cat, plans.Options{Log: inv.log})
			if err := st.Load(ctx); err != nil {
				return err
			}
			row, ok := st.Snapshot().Row(args[0])
			if !ok {
				row = plans.Row{Tenant: args[0]}
			}
			return printTenant(inv.stdout, cat, row)
		}
		_, after, err := plans.Apply(ctx, pool, cat, args[0], *by, change)
		if err != nil {
			return err
		}
		return printTenant(inv.stdout, cat, after)
	}
}

// defaultActor is the operating system user at the host.
func defaultActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		return name
	}
	return name + "@" + host
}

// controlPool opens the control database named by database.control.dsn_env.
func controlPool(ctx context.Context, cfg config.Config) (*pgxpool.Pool, error) {
	env := cfg.Database.Control.DSNEnv
	dsn := os.Getenv(env)
	if dsn == "" {
		return nil, fmt.Errorf("database.control.dsn_env: $%s is empty; the tenant table lives in the control database", env)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", env, err)
	}
	pc.MaxConns = 2
	return pgxpool.NewWithConfig(ctx, pc)
}

// parseSet reads set's assignments.
func parseSet(args []string) (plans.Change, error) {
	c := plans.Change{Set: map[plans.Field]plans.Override{}, Shadow: map[plans.Field]bool{}}
	shadowed := map[plans.Field]bool{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || v == "" {
			return c, fmt.Errorf("%q: want NAME=VALUE (plan=NAME, FIELD=NUMBER, shadow=FIELD or enforce=FIELD)", a)
		}
		switch k {
		case "plan":
			p := v
			c.Plan = &p
		case "shadow", "enforce":
			f, err := plans.ParseField(v)
			if err != nil {
				return c, fmt.Errorf("%s: %w", a, err)
			}
			c.Shadow[f] = k == "shadow"
			shadowed[f] = k == "shadow"
		default:
			f, err := plans.ParseField(k)
			if err != nil {
				return c, fmt.Errorf("%s: %w", a, err)
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return c, fmt.Errorf("%s: %q is not a number", k, v)
			}
			if err := f.Check(n); err != nil {
				return c, err
			}
			c.Set[f] = plans.Override{Value: n, Enforce: true}
		}
	}
	// A new override named in shadow= starts in shadow mode: never
	// enforced, not even between two writes.
	for f, sh := range shadowed {
		if o, ok := c.Set[f]; ok {
			o.Enforce = !sh
			c.Set[f] = o
			delete(c.Shadow, f)
		}
	}
	return c, nil
}

// parseUnset reads unset's names.
func parseUnset(args []string) (plans.Change, error) {
	var c plans.Change
	for _, a := range args {
		if a == "plan" {
			empty := ""
			c.Plan = &empty
			continue
		}
		f, err := plans.ParseField(a)
		if err != nil {
			return c, err
		}
		c.Unset = append(c.Unset, f)
	}
	return c, nil
}

// printList prints the table's rows.
func printList(w io.Writer, s *plans.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tPLAN\tOVERRIDES\tUPDATED BY\tUPDATED AT")
	for _, r := range s.Rows() {
		plan := r.Plan
		plan = cmp.Or(plan, "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Tenant, plan, overridesText(r.Overrides), r.UpdatedBy, r.UpdatedAt)
	}
	if len(s.Rows()) == 0 {
		fmt.Fprintf(tw, "(no rows: every tenant is on the token's plan or the default plan %s)\n", s.Catalog().Default())
	}
	return tw.Flush()
}

func overridesText(o map[plans.Field]plans.Override) string {
	if len(o) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(o))
	for f, v := range o {
		s := fmt.Sprintf("%s=%s", f, num(v.Value))
		if !v.Enforce {
			s += " (shadow)"
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// printTenant prints a row and the limits it puts in force (without a
// token's plan claim, which only a request carries).
func printTenant(w io.Writer, cat *plans.Catalog, r plans.Row) error {
	snap, errs := plans.NewSnapshot(cat, []plans.Row{r}, 0)
	e := snap.Resolve(r.Tenant, "")
	src := "table"
	if r.Plan == "" {
		src = "default"
	}
	fmt.Fprintf(w, "tenant %s: plan %s (%s)", r.Tenant, e.Plan, src)
	if r.UpdatedBy != "" {
		fmt.Fprintf(w, ", updated by %s at %s", r.UpdatedBy, r.UpdatedAt)
	}
	fmt.Fprintln(w)
	for _, err := range errs {
		fmt.Fprintf(w, "warning: %v\n", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tIN FORCE\tFROM\tSHADOW")
	for _, f := range plans.Fields() {
		from := "plan " + e.Plan
		if o, ok := r.Overrides[f]; ok && o.Enforce {
			from = "override"
		}
		shadow := "-"
		if v, ok := e.HasShadow(f); ok {
			shadow = num(v) + " (counted, not enforced)"
		}
		val := num(e.Limits.Get(f))
		if val == "0" && f != plans.JobsWeight {
			val = "0 (no limit)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f, val, from, shadow)
	}
	return tw.Flush()
}
