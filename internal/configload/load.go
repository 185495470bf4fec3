// Package configload is how every process of a cell (the server, the
// router) gets its final config: the spec's generated defaults, then the
// per-cell JSON file, then the environment, re-checked at boot with the same
// embedded CUE definitions and Rego policy the generator used, so a per-cell
// file cannot start a process the generator would have refused.
//
// Concurrency: Load and Check are safe for concurrent use; each call builds
// its own policy evaluator.
package configload

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/policy"
	"github.com/cellgate/cellgate/schema"
)

// Check re-checks the config a cell will run with the same CUE
// definitions and Rego policy the generator used: a per-cell file or a
// hand-edited spec cannot start a cell the generator would have refused.
// It returns the policy's warnings; any deny or schema error is an error
// that lists every message.
func Check(ctx context.Context, cfg config.Config) ([]string, error) {
	if err := schema.Check(cfg.JSON()); err != nil {
		return nil, fmt.Errorf("config is invalid:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	ev, err := policy.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	res, err := ev.Eval(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if len(res.Deny) > 0 {
		return res.Warn, fmt.Errorf("config is denied by policy:\n  deny: %s", strings.Join(res.Deny, "\n  deny: "))
	}
	return res.Warn, nil
}

// Load returns the final config: defaults (the spec's, gen/spec), then the
// per-cell JSON file at path (empty: none), re-checked with Check, then the
// environment's CELLGATE_ADDRESS (getenv; nil reads nothing), which tests and
// `make cells` use to pick a port and which takes no part in the policy.
// DSNs and secrets stay in the environment: the config names their
// variables and the shards and tenancy read them. Policy warnings are
// logged; a schema error or a deny is returned.
func Load(ctx context.Context, defaults config.Config, path string, getenv func(string) string, log *slog.Logger) (config.Config, error) {
	cfg, err := config.Overlay(defaults, path)
	if err != nil {
		return cfg, err
	}
	warns, err := Check(ctx, cfg)
	for _, w := range warns {
		log.Warn("config", "policy", w)
	}
	if err != nil {
		return cfg, err
	}
	if getenv != nil {
		if addr := getenv(AddressEnv); addr != "" {
			cfg.Server.Address = addr
		}
	}
	return cfg, nil
}

// AddressEnv overrides server.address after the check.
const AddressEnv = "CELLGATE_ADDRESS"
