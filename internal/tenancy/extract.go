package tenancy

import (
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Extractor finds the tenant id of a request. Extract returns either a valid
// id (see ValidateID) and a nil error, or "" and an *Error whose Kind says why
// there is none. It never panics and is safe for concurrent use.
type Extractor interface {
	Extract(r *http.Request) (string, error)
}

// NewExtractor validates cfg and returns the Extractor for cfg.Source. Zero
// fields take their value from DefaultConfig. The cell router calls it with the cells' Config so both sides agree
// on every request.
func NewExtractor(cfg Config) (Extractor, error) {
	x, err := newExtractor(withDefaults(cfg))
	if err != nil {
		return nil, err
	}
	return x, nil
}

// extractor is the one concrete Extractor. A switch on the source, rather
// than one type per source behind an interface, lets the middleware call it
// directly on the hot path.
type extractor struct {
	source Source
	maxLen int
	now    func() time.Time

	// header: the canonical header key, for a direct map lookup.
	header string

	// subdomain: the lower-case base domain without surrounding dots.
	base string

	// session
	cookie     string
	sessionKey []byte

	// jwt
	parser  *jwt.Parser
	keyFunc jwt.Keyfunc
	claim   string
	plan    string     // the plan claim; "" reads none
	remote  *remoteSet // the key set of JWT.KeySetURL; nil without one
}

func newExtractor(cfg Config) (*extractor, error) {
	if cfg.MaxIDLength < 1 || cfg.MaxIDLength > maxIDLengthLimit {
		return nil, configErr("MaxIDLength", "must be in 1..%d, got %d", maxIDLengthLimit, cfg.MaxIDLength)
	}
	if cfg.Now == nil {
		return nil, configErr("Now", "must not be nil")
	}
	x := &extractor{source: cfg.Source, maxLen: cfg.MaxIDLength, now: cfg.Now}
	switch cfg.Source {
	case SourceHeader:
		if !isToken(cfg.Header) {
			return nil, configErr("Header", "%q is not a valid HTTP header name", cfg.Header)
		}
		x.header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	case SourceSubdomain:
		base, err := normalizeBaseDomain(cfg.BaseDomain)
		if err != nil {
			return nil, err
		}
		x.base = base
	case SourceSession:
		if !isToken(cfg.Session.Cookie) {
			return nil, configErr("Session.Cookie", "%q is not a valid cookie name", cfg.Session.Cookie)
		}
		if len(cfg.Session.Key) < minSessionKey {
			return nil, configErr("Session.Key", "must be at least %d bytes, got %d", minSessionKey, len(cfg.Session.Key))
		}
		x.cookie = cfg.Session.Cookie
		// Copy so a caller that reuses or zeroes its buffer can't change us.
		x.sessionKey = append([]byte(nil), cfg.Session.Key...)
	case SourceJWT:
		if err := x.initJWT(cfg); err != nil {
			return nil, err
		}
	default:
		return nil, configErr("Source", "unknown source %q (want header, subdomain, session or jwt)", cfg.Source)
	}
	return x, nil
}

// Extract implements Extractor.
func (x *extractor) Extract(r *http.Request) (string, error) {
	id, e := x.extract(r)
	if e != nil {
		return "", e
	}
	return id, nil
}

// PlanExtractor is an Extractor that can also read the tenant's plan from
// an authenticated source. Only a verified token carries a plan: every
// other source returns "" for it, whatever the request holds.
type PlanExtractor interface {
	Extractor
	ExtractWithPlan(r *http.Request) (tenant, plan string, err error)
}

// ExtractWithPlan is Extract plus the verified token's plan claim (jwt
// source with JWT.PlanClaim set; "" otherwise).
func (x *extractor) ExtractWithPlan(r *http.Request) (string, string, error) {
	if x.source != SourceJWT || x.plan == "" {
		id, err := x.Extract(r)
		return id, "", err
	}
	id, plan, e := x.fromJWTPlan(r)
	if e != nil {
		return "", "", e
	}
	return id, plan, nil
}

func (x *extractor) extract(r *http.Request) (string, *Error) {
	switch x.source {
	case SourceHeader:
		return x.fromHeader(r)
	case SourceSubdomain:
		return x.fromSubdomain(r.Host)
	case SourceSession:
		return x.fromSession(r)
	default:
		return x.fromJWT(r)
	}
}

// fromHeader indexes the header map with the pre-canonicalized key instead of
// calling Header.Get, and allocates nothing. A repeated header is refused
// because proxies disagree on which copy wins, and the router and the cell
// must never disagree on the tenant.
func (x *extractor) fromHeader(r *http.Request) (string, *Error) {
	vs := r.Header[x.header]
	switch {
	case len(vs) == 0 || (len(vs) == 1 && vs[0] == ""):
		return "", errHeaderMissing
	case len(vs) > 1:
		return "", errHeaderRepeated
	}
	if e := validateID(vs[0], x.maxLen); e != nil {
		return "", e
	}
	return vs[0], nil
}

// fromSubdomain takes the one label in front of the base domain. DNS names
// are case-insensitive, so the label is lower-cased (allocating only when it
// has an upper-case letter); "acme" and "ACME" reach the same tenant.
func (x *extractor) fromSubdomain(host string) (string, *Error) {
	host = stripPort(host)
	host = strings.TrimSuffix(host, ".") // a fully qualified name
	n := len(host) - len(x.base)         // length of "label."
	if n < 2 || host[n-1] != '.' || !strings.EqualFold(host[n:], x.base) {
		return "", errHostNoTenant
	}
	label := host[:n-1]
	if strings.IndexByte(label, '.') >= 0 {
		return "", errHostNoTenant // more than one label: not a tenant host
	}
	if hasUpper(label) {
		label = strings.ToLower(label)
	}
	if e := validateID(label, x.maxLen); e != nil {
		return "", e
	}
	return label, nil
}

// stripPort removes a ":port" suffix, leaving IPv6 literals ("[::1]") intact.
func stripPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i:], ']') >= 0 {
		return host
	}
	return host[:i]
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

func normalizeBaseDomain(d string) (string, error) {
	base := strings.ToLower(strings.Trim(d, "."))
	if base == "" {
		return "", configErr("BaseDomain", "required for source %q", SourceSubdomain)
	}
	for _, label := range strings.Split(base, ".") {
		if label == "" || len(label) > 63 {
			return "", configErr("BaseDomain", "%q is not a valid domain name", d)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", configErr("BaseDomain", "%q is not a valid domain name", d)
			}
		}
	}
	return base, nil
}

// isToken reports whether s is a non-empty RFC 9110 token, the grammar of
// both header names and cookie names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
