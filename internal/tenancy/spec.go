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
		j := t.JWT
		cfg.JWT.Algorithms = j.Algorithms
		cfg.JWT.Claim = j.Claim
		cfg.JWT.PlanClaim = j.PlanClaim
		cfg.JWT.Leeway = j.Leeway.D()
		cfg.JWT.Issuer = j.Issuer
		cfg.JWT.Audience = j.Audience
		var given []string
		for _, g := range []struct{ path, v string }{
			{"tenancy.jwt.jwks_url", j.JWKSURL}, {"tenancy.jwt.jwks_file", j.JWKSFile},
			{"tenancy.jwt.key_file", j.KeyFile}, {"tenancy.jwt.key_env", j.KeyEnv},
		} {
			if g.v != "" {
				given = append(given, g.path)
			}
		}
		switch len(given) {
		case 0:
			return cfg, fmt.Errorf("tenancy.jwt: no verification keys for source \"jwt\"; set one of jwks_url (the identity provider's JWKS URL), jwks_file, key_file and key_env")
		case 1:
		default:
			return cfg, fmt.Errorf("tenancy.jwt: set exactly one of jwks_url, jwks_file, key_file and key_env for source \"jwt\", got %d (%s)", len(given), strings.Join(given, ", "))
		}
		switch {
		case j.JWKSURL != "":
			cfg.JWT.KeySetURL = j.JWKSURL
			cfg.JWT.KeySetRefresh = j.JWKSRefresh.D()
			cfg.JWT.UnknownKIDInterval = j.JWKSUnknownKIDInterval.D()
			cfg.JWT.KeySetTimeout = j.JWKSTimeout.D()
		case j.JWKSFile != "":
			set, err := os.ReadFile(j.JWKSFile)
			if err != nil {
				return cfg, fmt.Errorf("tenancy.jwt.jwks_file: %w", err)
			}
			cfg.JWT.KeySet = set
		case j.KeyFile != "":
			key, err := os.ReadFile(j.KeyFile)
			if err != nil {
				return cfg, fmt.Errorf("tenancy.jwt.key_file: %w", err)
			}
			cfg.JWT.Key = key
		default:
			key := getenv(j.KeyEnv)
			if strings.TrimSpace(key) == "" {
				return cfg, fmt.Errorf("tenancy.jwt.key_env: environment variable %s is not set; it must hold the HMAC secret or the PEM public key", j.KeyEnv)
			}
			cfg.JWT.Key = []byte(key)
		}
	}
	return cfg, nil
}
