package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/config"
)

// devDatabases is the `devdb` subcommand behind `make run`: given a server
// URL it creates one database per spec database (control and each shard)
// if missing, and prints `export VAR=DSN` lines for the spec's DSN
// variables. Database names are cellgate_<service>_<name>.
func devDatabases(ctx context.Context, cfg config.Config, base string, out io.Writer) error {
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
		db := devName(cfg.Service.Name, t.name)
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

// devName is a database name safe to use unquoted.
func devName(service, name string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	return "cellgate_" + r.Replace(service) + "_" + r.Replace(name)
}
