// Command server runs one cell of the generated service, or one of its
// operator tasks.
//
//	server [serve] [-config cell.json]   run the cell (default)
//	server migrate [-config cell.json] [-db NAME] [status|up|down N|force V]
//	                                     each database's migrations: report, apply, roll back, repair (migrate.go)
//	server check   [-config cell.json]   validate the final config (CUE + policy), then exit
//	server devdb   [-base URL] [-prefix P]  create this checkout's local databases, print their DSN exports (make run; devdb.go)
//
// Config = the spec's generated defaults (gen/spec) + the optional per-cell
// JSON file (-config or $CELLGATE_CONFIG) + the environment, which alone
// holds DSNs and secrets (the spec names the variables).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(ctx, os.Args[1:], log, os.Stdout); err != nil {
		log.Error("exit", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "migrate":
		return migrateMain(ctx, args, log, stdout)
	case "devdb":
		return devdbMain(ctx, args, log, stdout)
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	path := fs.String("config", os.Getenv("CELLGATE_CONFIG"), "per-cell JSON config file applied over the spec's defaults")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(ctx, *path, log)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, log)
	case "check":
		fmt.Fprintln(stdout, "config ok")
		return nil
	}
	return fmt.Errorf("unknown command %q; want serve, migrate, check or devdb", cmd)
}

// loadConfig builds the final config: defaults + file + the environment,
// checked (configload.Load).
func loadConfig(ctx context.Context, path string, log *slog.Logger) (config.Config, error) {
	return configload.Load(ctx, spec.Config(), path, os.Getenv, log)
}
