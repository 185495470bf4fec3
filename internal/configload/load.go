// Package configload is how every process of a cell (the server, the
// router) and the generator check a config: one validation path (Validate:
// CUE definitions, Go shape, start-up rules, Rego policy), so a config that
// `server check` accepts never fails `serve` for a config reason, and one
// the generator accepts has defaults that pass `server check`. Load builds
// a process's final config: the spec's generated defaults, then the
// per-cell JSON file, then the environment.
//
// Concurrency: Load, Check and Validate are safe for concurrent use; the
// policy evaluator is compiled once and shared.
package configload

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/policy"
	"github.com/cellgate/cellgate/schema"
)

var shared struct {
	once sync.Once
	ev   *policy.Evaluator
	err  error
}

// evaluator compiles the embedded policy once per process.
func evaluator(ctx context.Context) (*policy.Evaluator, error) {
	shared.once.Do(func() { shared.ev, shared.err = policy.New(ctx) })
	if shared.err != nil {
		return nil, fmt.Errorf("policy: %w", shared.err)
	}
	return shared.ev, nil
}

// Check validates a final config (Validate in mode Final) and returns the
// policy's warnings. The config was built in memory: issues carry no file
// position.
func Check(ctx context.Context, cfg config.Config) ([]string, error) {
	_, warns, err := Validate(ctx, config.Indent(cfg.JSON()), "", Final)
	return warns, err
}

// Export is the final config `server export` prints: the per-cell file at
// path (empty: none) merged over defaults (objects merge, lists replace
// whole lists, null lists are empty), then completed by the CUE
// definitions, so a list entry the file writes in part gets the schema's
// defaults for the rest. No start-up rule or policy runs: conftest and opa
// judge the output. The file's shape and CUE problems are reported at once
// (a field its shape refused is removed first, the default standing in)
// and placed in it by spec path, as Load places them, never at a line of
// the merged document.
func Export(defaults config.Config, path string) ([]byte, error) {
	in, err := fileInput(defaults, path, Final)
	if err != nil {
		return nil, err
	}
	var v verdict
	doc, err := v.userDoc(in)
	if err != nil {
		return nil, err
	}
	out, err := schema.Unify(doc)
	if err != nil {
		return nil, err
	}
	v.addAll(out.Issues)
	if v.any() {
		return nil, v.fail(v.issues, in.src)
	}
	return config.Indent(out.Complete), nil
}

// fileInput is what Load and Export validate: defaults, with the per-cell
// file at path (empty: none) as the user's document over them.
func fileInput(defaults config.Config, path string, mode Mode) (input, error) {
	in := input{doc: defaults.JSON(), mode: mode}
	if path == "" {
		return in, nil
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return in, fmt.Errorf("config file: %w", err)
	}
	in.base, in.doc, in.src = in.doc, file, schema.JSONSource(path, file)
	return in, nil
}

// Load returns the final config: defaults (the spec's, gen/spec), then the
// per-cell JSON file at path (empty: none), validated with Validate (mode
// Final), then the environment's CELLGATE_ADDRESS (getenv; nil reads
// nothing), which tests and `make cells` use to pick a port; its form is
// checked like server.address. DSNs and secrets stay in the environment:
// the config names their variables and the shards and tenancy read them.
// Policy warnings are logged; every problem is returned at once, placed in
// the file at path (a field it does not set is marked as a default).
func Load(ctx context.Context, defaults config.Config, path string, getenv func(string) string, log *slog.Logger) (config.Config, error) {
	return LoadMode(ctx, Final, defaults, path, getenv, log)
}

// LoadMode is Load with the mode given: the cell router, which serves
// every cell, loads in mode Spec (no server.cell needed).
func LoadMode(ctx context.Context, mode Mode, defaults config.Config, path string, getenv func(string) string, log *slog.Logger) (config.Config, error) {
	in, err := fileInput(defaults, path, mode)
	if err != nil {
		return defaults, err
	}
	cfg, warns, err := validate(ctx, in)
	for _, w := range warns {
		log.Warn("config", "policy", w)
	}
	if err != nil {
		return cfg, err
	}
	if getenv != nil {
		if addr := getenv(AddressEnv); addr != "" {
			if err := CheckAddress(addr); err != nil {
				return cfg, fmt.Errorf("%s: %w", AddressEnv, err)
			}
			cfg.Server.Address = addr
		}
	}
	return cfg, nil
}

// AddressEnv overrides server.address after the check.
const AddressEnv = "CELLGATE_ADDRESS"
