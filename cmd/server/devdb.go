package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/config"
)

// devdbSynopsis follows `server devdb [-config cell.json]` in its usage.
const devdbSynopsis = "[-base URL] [-prefix P | -checkout DIR]"

// devdbHelp is what `server devdb -h` prints under its usage line.
const devdbHelp = `Creates one database per spec database (control and each shard) on the server at -base if
missing, and prints "export VAR=DSN" lines for the spec's DSN variables (make run evals them).
Database names are <prefix>_<service>_<name>. The prefix is -prefix, else
$CELLGATE_DEVDB_PREFIX, else "cg" and 8 hex digits of a hash of the checkout's absolute path
(-checkout, default the working directory), so two checkouts on one server never share
databases.
`

// devdbCommand adds the `devdb` subcommand's flags (behind `make run`) to
// fs and returns the command.
func devdbCommand(fs *flag.FlagSet) func(context.Context, invocation) error {
	base := fs.String("base", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server URL to create the databases on")
	prefix := fs.String("prefix", os.Getenv("CELLGATE_DEVDB_PREFIX"), "database name prefix (default: derived from -checkout)")
	checkout := fs.String("checkout", "", "the checkout whose path the default prefix hashes (default: the working directory)")
	return func(ctx context.Context, inv invocation) error {
		p, err := devPrefix(*prefix, *checkout)
		if err != nil {
			return err
		}
		cfg, err := inv.cfg()
		if err != nil {
			return err
		}
		return devDatabases(ctx, cfg, *base, p, inv.stdout)
	}
}

var rePrefix = regexp.MustCompile(`^[a-z][a-z0-9_]{0,19}$`)

// devPrefix is the explicit prefix, checked, or one derived from the
// checkout's absolute path.
func devPrefix(explicit, checkout string) (string, error) {
	if explicit != "" {
		if !rePrefix.MatchString(explicit) {
			return "", fmt.Errorf("devdb: prefix %q (-prefix or CELLGATE_DEVDB_PREFIX) must match %s", explicit, rePrefix)
		}
		return explicit, nil
	}
	if checkout == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("devdb: %w", err)
		}
		checkout = wd
	}
	abs, err := filepath.Abs(checkout)
	if err != nil {
		return "", fmt.Errorf("devdb: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	return "cg" + hex.EncodeToString(sum[:4]), nil
}

// devDatabases creates one database per spec database (control and each
// shard) on the server at base if missing, and prints `export VAR=DSN`
// lines for the spec's DSN variables.
func devDatabases(ctx context.Context, cfg config.Config, base, prefix string, out io.Writer) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("devdb: -base must be a postgres:// URL, got %q", base)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("devdb: cannot reach PostgreSQL at %s: %w", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	type target struct{ env, name string }
	targets := []target{{cfg.Database.Control.DSNEnv, cfg.Database.Control.Name}}
	for _, s := range cfg.Database.Shards {
		targets = append(targets, target{s.DSNEnv, s.Name})
	}
	for _, t := range targets {
		db := devName(prefix, cfg.Service.Name, t.name)
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			return fmt.Errorf("devdb: %w", err)
		}
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
				return fmt.Errorf("devdb: create %s: %w", db, err)
			}
		}
		du := *u
		du.Path = "/" + db
		fmt.Fprintf(out, "export %s='%s'\n", t.env, du.String())
	}
	return nil
}

// devName is a database name safe to use unquoted, at most PostgreSQL's
// 63 bytes.
func devName(prefix, service, name string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	n := prefix + "_" + r.Replace(service) + "_" + r.Replace(name)
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}
