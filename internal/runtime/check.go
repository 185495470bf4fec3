package runtime

import (
	"context"
	"encoding/json"
	"fmt"
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
	raw := cfg.JSON()
	if err := schema.Check(raw); err != nil {
		return nil, fmt.Errorf("config is invalid:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	ev, err := policy.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var input any
	if err := json.Unmarshal(raw, &input); err != nil {
		return nil, err
	}
	res, err := ev.Eval(ctx, input)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if len(res.Deny) > 0 {
		return res.Warn, fmt.Errorf("config is denied by policy:\n  deny: %s", strings.Join(res.Deny, "\n  deny: "))
	}
	return res.Warn, nil
}
