package tenancy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/cellgate/cellgate/internal/probe"
)

// PublicPaths is an immutable set of request paths that bypass tenancy: the
// probes plus the app's public routes. Safe for concurrent use.
type PublicPaths struct {
	exact    map[string]struct{}
	prefixes []string // each ends in "/"
}

// NewPublicPaths builds the set from paths, always adding the probe paths
// (package probe). Each
// path starts with "/" and is either exact ("/login") or a prefix form ending
// in "/*" ("/public/*"), which matches every path that starts with "/public/"
// but not "/public" itself (list that separately). No other "*" is allowed,
// nor "." or ".." segments. The error names the offending path.
func NewPublicPaths(paths ...string) (*PublicPaths, error) {
	p := &PublicPaths{exact: make(map[string]struct{}, len(paths)+3)}
	for _, s := range probe.Paths() {
		p.exact[s] = struct{}{}
	}
	for _, s := range paths {
		if !strings.HasPrefix(s, "/") {
			return nil, fmt.Errorf("tenancy: public path %q: must start with /", s)
		}
		prefix, isPrefix := strings.CutSuffix(s, "*")
		if isPrefix && !strings.HasSuffix(prefix, "/") {
			return nil, fmt.Errorf("tenancy: public path %q: a wildcard must be a whole trailing segment (/prefix/*)", s)
		}
		if strings.Contains(prefix, "*") {
			return nil, fmt.Errorf("tenancy: public path %q: only a trailing /* is allowed", s)
		}
		if hasDotSegment(prefix) {
			return nil, fmt.Errorf("tenancy: public path %q: must not hold . or .. segments", s)
		}
		if isPrefix {
			p.prefixes = append(p.prefixes, prefix)
		} else {
			p.exact[s] = struct{}{}
		}
	}
	return p, nil
}

// Match reports whether path is public. path must be the path the server
// routes on (RoutedPath: the raw, still-escaped path when there is one), so that what
// is skipped is exactly what the router sends to the public handler. A path
// holding a "." or ".." segment (also percent-encoded) never matches a prefix,
// so no path normalization downstream can turn a public path into another.
func (p *PublicPaths) Match(path string) bool {
	if _, ok := p.exact[path]; ok {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(path, pre) {
			return !hasDotSegment(path)
		}
	}
	return false
}

// MatchRequest reports whether r's routed path is public; the cell router uses
// it to agree with the cells' Skipper.
func (p *PublicPaths) MatchRequest(r *http.Request) bool {
	return p.Match(RoutedPath(r))
}

// RoutedPath is the path a cell routes r on, exactly as Echo's router takes
// it: the raw, still-escaped path when the URL has one, else the decoded
// path. The router and the cells must agree on it, or a request could be
// public on one side and a tenant route on the other.
func RoutedPath(r *http.Request) string {
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// hasDotSegment reports whether a path has a segment made only of dots and
// percent-encoded dots ("%2e"), i.e. one that a normalizer would resolve.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg != "" && isDots(seg) {
			return true
		}
	}
	return false
}

func isDots(seg string) bool {
	for seg != "" {
		switch {
		case seg[0] == '.':
			seg = seg[1:]
		case len(seg) >= 3 && seg[0] == '%' && seg[1] == '2' && (seg[2] == 'e' || seg[2] == 'E'):
			seg = seg[3:]
		default:
			return false
		}
	}
	return true
}
