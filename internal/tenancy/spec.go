package tenancy

import (
	"fmt"
	"os"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
)

// FromSpec turns the spec's tenancy block into an Extractor's Config,
// reading keys from the environment (or key_file) as the spec names them.
// The cells and the cell router both call it, so both extract tenants the
// same way. Errors name the spec field or the variable to set.
func FromSpec(t config.Tenancy, getenv func(string) string) (Config, error) {
	cfg := DefaultConfig
	src, err := ParseSource(t.Source)
	if err != nil {
		return cfg, fmt.Errorf("tenancy.source: %w", err)
	}
	cfg.Source = src
	cfg.Header = t.Header.Name
	cfg.BaseDomain = t.Subdomain.BaseDomain
	cfg.MaxIDLength = t.MaxIDBytes
	switch src {
	case SourceSession:
		cfg.Session.Cookie = t.Session.Cookie
		key := getenv(t.Session.KeyEnv)
		if key == "" {
			return cfg, fmt.Errorf("tenancy.session.key_env: environment variable %s is not set; it must hold the session HMAC key (32 bytes or more)", t.Session.KeyEnv)
		}
		cfg.Session.Key = []byte(key)
	case SourceJWT:
		cfg.JWT.Algorithms = t.JWT.Algorithms
		cfg.JWT.Claim = t.JWT.Claim
		cfg.JWT.Leeway = t.JWT.Leeway.D()
		switch {
		case t.JWT.JWKSFile != "":
			set, err := os.ReadFile(t.JWT.JWKSFile)
			if err != nil {
				return cfg, fmt.Errorf("tenancy.jwt.jwks_file: %w", err)
			}
			cfg.JWT.KeySet = set
		case t.JWT.KeyFile != "":
			key, err := os.ReadFile(t.JWT.KeyFile)
			if err != nil {
				return cfg, fmt.Errorf("tenancy.jwt.key_file: %w", err)
			}
			cfg.JWT.Key = key
		default:
			key := getenv(t.JWT.KeyEnv)
			if strings.TrimSpace(key) == "" {
				return cfg, fmt.Errorf("tenancy.jwt.key_env: environment variable %s is not set; it must hold the HMAC secret or the PEM public key", t.JWT.KeyEnv)
			}
			cfg.JWT.Key = []byte(key)
		}
	}
	return cfg, nil
}
