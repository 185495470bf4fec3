package configload

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/tenancy"
	"github.com/cellgate/cellgate/schema"
)

// Mode says what a config is for, which decides one rule.
type Mode int

const (
	// Spec is the generator's view: the spec may list many cells and leave
	// server.cell empty, since the per-cell deploy files set it.
	Spec Mode = iota
	// Final is a config a process runs: with more than one cell it must
	// name its cell, or it would open every shard and serve every slot.
	Final
)

// Error is a refused config: every problem at once, ordered by file:line,
// each naming its spec path.
type Error struct {
	// Issues are the problems, sorted (schema.SortIssues).
	Issues []schema.Issue
}

func (e *Error) Error() string {
	return "config is invalid:\n  " + strings.ReplaceAll(schema.FormatIssues(e.Issues), "\n", "\n  ")
}

// Paths returns the spec path of every issue, in order.
func (e *Error) Paths() []string {
	out := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		out[i] = is.Path
	}
	return out
}

// Validate is the one validation path of a config, shared by the generator
// (mode Spec, on CUE's export), `server check` and `server serve` (mode
// Final, on the final config): the CUE definitions (types, ranges, enums),
// the config's Go shape (durations that parse), the rules the server would
// otherwise meet only at start (StartRules), then the Rego policy. It
// returns the typed config and the policy's warnings; every refusal is an
// *Error listing all problems. name labels positions in raw.
func Validate(ctx context.Context, raw []byte, name string, mode Mode) (config.Config, []string, error) {
	var cfg config.Config
	// The CUE definitions first; the typed checks below need the shape
	// right, the policy needs every type right.
	var issues []schema.Issue
	complete, err := schema.Complete(raw, name)
	cueOK := err == nil
	if !cueOK {
		se, ok := err.(*schema.Error)
		if !ok {
			return cfg, nil, &Error{Issues: []schema.Issue{{Msg: err.Error()}}}
		}
		issues = se.Issues
		complete = raw // the typed checks below still run where the shape allows
	}
	if es := config.CheckShape(complete); len(es) > 0 {
		if cueOK {
			for _, e := range es {
				issues = append(issues, schema.Issue{Path: e.Path, Msg: e.Msg})
			}
		}
		return cfg, nil, &Error{Issues: schema.SortIssues(issues)}
	}
	cfg, err = decode(complete)
	if err != nil {
		return cfg, nil, &Error{Issues: append(issues, schema.Issue{Msg: err.Error()})}
	}
	issues = append(issues, StartRules(cfg, mode)...)
	issues = append(issues, nameRules(cfg)...)
	if !cueOK {
		return cfg, nil, &Error{Issues: schema.SortIssues(issues)}
	}
	ev, err := evaluator(ctx)
	if err != nil {
		return cfg, nil, err
	}
	res, err := ev.Eval(ctx, cfg)
	if err != nil {
		return cfg, nil, fmt.Errorf("policy: %w", err)
	}
	for _, d := range res.Deny {
		path, msg := splitPath(d)
		issues = append(issues, schema.Issue{Path: path, Msg: msg})
	}
	if len(issues) == 0 {
		issues = mapRules(cfg)
	}
	if len(issues) > 0 {
		return cfg, res.Warn, &Error{Issues: schema.SortIssues(issues)}
	}
	return cfg, res.Warn, nil
}

// splitPath cuts a policy message "path: text" into its parts; the policy
// starts every message with the spec path it is about.
func splitPath(msg string) (string, string) {
	p, rest, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(p, " \"") {
		if i := strings.Index(p, " ("); ok && i > 0 && !strings.ContainsAny(p[:i], " \"") {
			return p[:i], p[i+1:] + ": " + rest
		}
		return "", msg
	}
	return p, rest
}

// StartRules are the checks that the server's start-up code (listener,
// tenancy, cell router, shard map) would otherwise be the first to make:
// they live here so `server check` and the generator refuse what `serve`
// would. Each issue names its spec path.
func StartRules(cfg config.Config, mode Mode) []schema.Issue {
	var out []schema.Issue
	add := func(path, format string, args ...any) {
		out = append(out, schema.Issue{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if err := CheckAddress(cfg.Server.Address); err != nil {
		add("server.address", "%v", err)
	}
	for i, p := range cfg.Tenancy.PublicPaths {
		if _, err := tenancy.NewPublicPaths(p); err != nil {
			add(fmt.Sprintf("tenancy.public_paths[%d]", i), "%s", strings.TrimPrefix(err.Error(), "tenancy: "))
		}
	}
	for i, c := range cfg.Cells {
		if err := cells.CheckURL(c.URL); err != nil {
			add(fmt.Sprintf("cells[%d].url", i), "%v", err)
		}
	}
	if mode == Final && len(cfg.Cells) > 1 && cfg.Server.Cell == "" {
		add("server.cell", "empty with %d cells; a process serves one cell: set server.cell (the generated gen/deploy/<cell>.json does), or it would open every shard and serve every slot", len(cfg.Cells))
	}
	return out
}

// mapRules builds the cell and shard maps as the server does at start. The
// policy names gaps, overlaps and straddles in its own words; this runs
// only after it passed and catches whatever else the builders refuse.
func mapRules(cfg config.Config) []schema.Issue {
	if _, err := cells.DeployFiles(cfg); err != nil {
		path, msg := splitPath(err.Error())
		if path == "" {
			path = "cells"
		}
		return []schema.Issue{{Path: path, Msg: msg}}
	}
	return nil
}

// CheckAddress accepts a listen address of the form host:port or :port,
// with a numeric port (0-65535).
func CheckAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not a listen address; write \":8080\" or \"127.0.0.1:8080\"", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("%q: port %q must be a number 0-65535; write e.g. \":8080\"", addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: host %q is not a host name or IP address", addr, host)
	}
	return nil
}
