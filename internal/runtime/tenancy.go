package runtime

import (
	"fmt"
	"os"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/runtime/tenancy"
)

// TenancyConfig turns the spec's tenancy block into the middleware's
// config, reading keys from the environment (or key_file) as the spec
// names them. The cell router calls it too, so both extract tenants the
// same way. Errors name the spec field or the variable to set.
func TenancyConfig(t config.Tenancy, getenv func(string) string) (tenancy.Config, error) {
	cfg := tenancy.DefaultConfig
	src, err := tenancy.ParseSource(t.Source)
	if err != nil {
		return cfg, fmt.Errorf("tenancy.source: %w", err)
	}
	cfg.Source = src
	cfg.Header = t.Header.Name
	cfg.BaseDomain = t.Subdomain.BaseDomain
	cfg.MaxIDLength = t.MaxIDBytes
	skip, err := tenancy.PublicSkipper(t.PublicPaths...)
	if err != nil {
		return cfg, fmt.Errorf("tenancy.public_paths: %w", err)
	}
	cfg.Skipper = skip
	switch src {
	case tenancy.SourceSession:
		cfg.Session.Cookie = t.Session.Cookie
		key := getenv(t.Session.KeyEnv)
		if key == "" {
			return cfg, fmt.Errorf("tenancy.session.key_env: environment variable %s is not set; it must hold the session HMAC key (32 bytes or more)", t.Session.KeyEnv)
		}
		cfg.Session.Key = []byte(key)
	case tenancy.SourceJWT:
		cfg.JWT.Algorithms = t.JWT.Algorithms
		cfg.JWT.Claim = t.JWT.Claim
		cfg.JWT.Leeway = t.JWT.Leeway.D()
		if t.JWT.KeyFile != "" {
			key, err := os.ReadFile(t.JWT.KeyFile)
			if err != nil {
				return cfg, fmt.Errorf("tenancy.jwt.key_file: %w", err)
			}
			cfg.JWT.Key = key
		} else {
			key := getenv(t.JWT.KeyEnv)
			if strings.TrimSpace(key) == "" {
				return cfg, fmt.Errorf("tenancy.jwt.key_env: environment variable %s is not set; it must hold the HMAC secret or the PEM public key", t.JWT.KeyEnv)
			}
			cfg.JWT.Key = []byte(key)
		}
	}
	return cfg, nil
}
