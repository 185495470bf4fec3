package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/policy"
	"github.com/cellgate/cellgate/schema"
)

// CheckConfig re-checks the config a cell will run with the same CUE
// definitions and Rego policy the generator used: a per-cell file or a
// hand-edited spec cannot start a cell the generator would have refused.
// It returns the policy's warnings; any deny or schema error is an error
// that lists every message.
func CheckConfig(ctx context.Context, cfg config.Config) ([]string, error) {
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

// LoadConfig is how every process of a cell (server, router) gets its
// config: the spec's generated defaults, then the per-cell JSON file at path
// (empty: none), re-checked with CheckConfig. Policy warnings are logged;
// a schema error or a deny is returned.
func LoadConfig(ctx context.Context, defaults config.Config, path string, log *slog.Logger) (config.Config, error) {
	cfg, err := config.Overlay(defaults, path)
	if err != nil {
		return cfg, err
	}
	warns, err := CheckConfig(ctx, cfg)
	for _, w := range warns {
		log.Warn("config", "policy", w)
	}
	return cfg, err
}
