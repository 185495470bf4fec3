// Command server runs one cell of the generated service, or one of its
// operator tasks.
//
//	server [serve] [-config cell.json]   run the cell (the default)
//	server migrate [-config cell.json] [-db NAME] [-schema app|jobs|plans|idempotency|shardmap] [status|up|down N|force V]
//	                                     each database's migrations: report, apply, roll back, repair (migrate.go)
//	server check   [-config cell.json]   validate the final config (CUE, start-up rules, policy), then exit
//	server export  [-config cell.json]   print the final config as JSON (for conftest, opa eval), then exit
//	server devdb   [-config cell.json] [-base URL] [-prefix P | -checkout DIR]
//	                                     create this checkout's local databases, print their DSN exports (make run; devdb.go)
//
// `server -h` lists the commands; `server <command> -h` prints one
// command's usage and flags.
//
// Config = the spec's generated defaults (gen/spec) + the optional per-cell
// JSON file (-config or $CELLGATE_CONFIG) + the environment, which alone
// holds DSNs and secrets (the spec names the variables).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/cells/slotmove"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/configload"
	"github.com/cellgate/cellgate/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	level, lerr := telemetry.ParseLevel("CELLGATE_LOG_LEVEL", os.Getenv("CELLGATE_LOG_LEVEL"))
	// Every line logged with a traced context carries its trace id.
	log := slog.New(telemetry.LogHandler{Handler: slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})})
	if lerr != nil {
		log.Error("exit", "error", lerr.Error())
		os.Exit(1)
	}
	err := run(ctx, os.Args[1:], log, os.Stdout, os.Stderr)
	var ue usageError
	switch {
	case err == nil:
	case errors.As(err, &ue):
		// run has printed the error and the usage on stderr; a log line
		// would only repeat them.
		os.Exit(2)
	default:
		log.Error("exit", "error", err.Error())
		// A refused config is read by people: print it as lines too.
		var ce *configload.Error
		var fe *config.FileError
		if errors.As(err, &ce) || errors.As(err, &fe) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
}

// usageError is a command line that names an unknown command, a bad flag,
// an unexpected argument or a bad action: run prints it with the usage
// (usage; nil: the command's) on stderr, and main exits 2 instead of
// logging an error. A command returns one for a bad argument it parses
// itself.
type usageError struct {
	msg   string
	usage func(io.Writer)
}

func (e usageError) Error() string { return e.msg }

// invocation is what a command runs with.
type invocation struct {
	// cfg loads the final config (defaults + -config file + environment).
	cfg func() (config.Config, error)
	// path is the -config file ("" for none).
	path string
	// args are the positional arguments after the command's flags.
	args   []string
	log    *slog.Logger
	stdout io.Writer
}

// command is one subcommand of the server.
type command struct {
	name string
	// synopsis follows the name in the usage line.
	synopsis string
	// summary is the one line `server -h` shows.
	summary string
	// help is what the command's -h prints under its usage line; "" prints
	// the summary.
	help string
	// positional: the command takes arguments after its flags (in
	// invocation.args); without it any is a usage error.
	positional bool
	// setup adds the command's own flags (every command has -config) and
	// returns the function that runs it with their values.
	setup func(fs *flag.FlagSet) func(ctx context.Context, inv invocation) error
}

// commands are the server's subcommands, in the order `server -h` lists
// them; the first is the default.
var commands = []command{
	{
		name:    "serve",
		summary: "run the cell: HTTP, jobs and migrations (the default command)",
		setup: func(*flag.FlagSet) func(context.Context, invocation) error {
			return func(ctx context.Context, inv invocation) error {
				cfg, err := inv.cfg()
				if err != nil {
					return err
				}
				return serve(ctx, cfg, inv.log)
			}
		},
	},
	{
		name:       "migrate",
		synopsis:   migrateSynopsis,
		summary:    "report, apply, roll back or repair each database's migrations (default: apply them all), then exit",
		help:       migrateHelp,
		positional: true,
		setup:      migrateCommand,
	},
	{
		name:    "export",
		summary: "print the final config (spec defaults, -config file, the schema's defaults) as JSON for conftest and opa, then exit",
		setup: func(*flag.FlagSet) func(context.Context, invocation) error {
			return func(_ context.Context, inv invocation) error {
				full, err := configload.Export(spec.Config(), inv.path)
				if err != nil {
					return err
				}
				_, err = inv.stdout.Write(append(full, '\n'))
				return err
			}
		},
	},
	{
		name:    "check",
		summary: "validate the final config (spec defaults, -config file, environment) with CUE and the policy, then exit; -databases also checks the shards can stream online slot moves",
		setup: func(fs *flag.FlagSet) func(context.Context, invocation) error {
			dbs := fs.Bool("databases", false, "also connect to every shard and check what online slot moves need: wal_level = logical and a replica identity covering slot on each tenant table")
			return func(ctx context.Context, inv invocation) error {
				cfg, err := inv.cfg()
				if err != nil {
					return err
				}
				fmt.Fprintln(inv.stdout, "config ok")
				if !*dbs {
					return nil
				}
				for i, sh := range cfg.Database.Shards {
					dsn := os.Getenv(sh.DSNEnv)
					if dsn == "" {
						return fmt.Errorf("database.shards[%d] (%s): environment variable %s is not set", i, sh.Name, sh.DSNEnv)
					}
					if err := slotmove.CheckShard(ctx, slotmove.Shard{Name: sh.Name, DSN: dsn}, cfg.Database.TenantTables); err != nil {
						return err
					}
				}
				fmt.Fprintln(inv.stdout, "databases ok: every shard can stream online slot moves")
				return nil
			}
		},
	},
	{
		name:       "tenants",
		synopsis:   tenantsSynopsis,
		summary:    "list, read and change the cell's tenant table (plans, overrides, shadow mode), then exit",
		help:       tenantsHelp,
		positional: true,
		setup:      tenantsCommand,
	},
	{
		name:     "devdb",
		synopsis: devdbSynopsis,
		summary:  "create this checkout's databases on a local PostgreSQL and print their DSN exports (make run)",
		help:     devdbHelp,
		setup:    devdbCommand,
	},
}

// run parses args (without the program name) and runs the command they
// name. -h on its own or after a command (wherever the command parses its
// flags) prints usage to stdout and returns nil; a bad command line prints
// the error and the usage to stderr and returns a usageError.
func run(ctx context.Context, args []string, log *slog.Logger, stdout, stderr io.Writer) error {
	name := commands[0].name
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
		if name == "help" {
			usage(stdout)
			return nil
		}
	} else if len(args) > 0 && isHelp(args[0]) {
		usage(stdout)
		return nil
	}
	cmd, ok := lookup(name)
	if !ok {
		return report(stderr, usageError{fmt.Sprintf("unknown command %q; want one of %s", name, strings.Join(names(), ", ")), usage})
	}
	fs := flag.NewFlagSet("server "+cmd.name, flag.ContinueOnError)
	path := fs.String("config", os.Getenv("CELLGATE_CONFIG"), "per-cell JSON config file applied over the spec's defaults; $CELLGATE_CONFIG when not given")
	exec := cmd.setup(fs)
	fs.Usage = func() {} // printed below, to stdout for -h and to stderr otherwise
	fs.SetOutput(io.Discard)
	printUsage := func(out io.Writer) {
		fmt.Fprintf(out, "usage: server %s [-config cell.json]", cmd.name)
		if cmd.synopsis != "" {
			fmt.Fprint(out, " "+cmd.synopsis)
		}
		if cmd.help != "" {
			fmt.Fprintf(out, "\n\n%s", cmd.help)
		} else {
			fmt.Fprintf(out, "\n\n%s.\n", upper(cmd.summary))
		}
		fmt.Fprint(out, "\nflags:\n")
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	err := fs.Parse(args)
	switch {
	case err != nil && !errors.Is(err, flag.ErrHelp):
		err = usageError{msg: err.Error()}
	case err == nil && fs.NArg() > 0 && !cmd.positional:
		err = usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case err == nil:
		inv := invocation{
			cfg:    func() (config.Config, error) { return loadConfig(ctx, *path, log) },
			path:   *path,
			args:   fs.Args(),
			log:    log,
			stdout: stdout,
		}
		err = exec(ctx, inv)
	}
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout)
		return nil
	case errors.As(err, &ue):
		if ue.usage == nil {
			ue.usage = printUsage
		}
		return report(stderr, ue)
	}
	return err
}

// report prints a usage error and the usage it names on w, and returns it.
func report(w io.Writer, ue usageError) error {
	fmt.Fprintln(w, ue.msg)
	ue.usage(w)
	return ue
}

// usage lists the commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: server [command] [-config cell.json] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\n`server <command> -h` prints a command's flags. Config is the spec's defaults,")
	fmt.Fprintln(w, "then the -config file (or $CELLGATE_CONFIG), then the environment (DSNs, secrets).")
}

func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func names() []string {
	out := make([]string, len(commands))
	for i, c := range commands {
		out[i] = c.name
	}
	return out
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// loadConfig builds the final config: defaults + file + the environment,
// checked (configload.Load).
func loadConfig(ctx context.Context, path string, log *slog.Logger) (config.Config, error) {
	cfg, err := configload.Load(ctx, spec.Config(), path, os.Getenv, log)
	if err == nil {
		// Every config reason to refuse a start lies before this line: what
		// follows fails only for the environment (databases, keys, ports).
		log.Info("config accepted", "cell", cfg.Server.Cell)
	}
	return cfg, err
}
