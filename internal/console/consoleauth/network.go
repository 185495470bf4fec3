package consoleauth

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/realclientip/realclientip-go"
)

// Network says where a console request comes from. Its zero value trusts
// no proxy: the client is the connection's peer, and a request is over TLS
// only when this process terminated it.
type Network struct {
	trusted []net.IPNet
	xff     realclientip.Strategy
}

// NewNetwork trusts the proxies in the given CIDRs (or single addresses).
// Only from a trusted peer are X-Forwarded-For (its rightmost address
// outside the trusted ranges: the one the first trusted proxy saw) and
// X-Forwarded-Proto read; from any other peer they are ignored.
func NewNetwork(trustedProxies []string) (Network, error) {
	if len(trustedProxies) == 0 {
		return Network{}, nil
	}
	nets, err := realclientip.AddressesAndRangesToIPNets(trustedProxies...)
	if err != nil {
		return Network{}, fmt.Errorf("trusted_proxies %q: %w", trustedProxies, err)
	}
	xff, err := realclientip.NewRightmostTrustedRangeStrategy("X-Forwarded-For", nets)
	if err != nil {
		return Network{}, fmt.Errorf("trusted_proxies: %w", err)
	}
	return Network{trusted: nets, xff: xff}, nil
}

// Client returns a request's client address and whether it came over TLS.
func (n Network) Client(r *http.Request) (addr string, tls bool) {
	peer := realclientip.RemoteAddrStrategy{}.ClientIP(nil, r.RemoteAddr)
	if peer == "" {
		peer = r.RemoteAddr
	}
	tls = r.TLS != nil
	if n.xff == nil || !n.trustedPeer(peer) {
		return peer, tls
	}
	if ip := n.xff.ClientIP(r.Header, r.RemoteAddr); ip != "" {
		addr = ip
	} else {
		addr = peer
	}
	if !tls {
		// The last value is the one the trusted peer set.
		vals := r.Header.Values("X-Forwarded-Proto")
		if len(vals) > 0 {
			parts := strings.Split(vals[len(vals)-1], ",")
			tls = strings.EqualFold(strings.TrimSpace(parts[len(parts)-1]), "https")
		}
	}
	return addr, tls
}

func (n Network) trustedPeer(peer string) bool {
	ip := net.ParseIP(peer)
	if ip == nil {
		return false
	}
	for _, t := range n.trusted {
		if t.Contains(ip) {
			return true
		}
	}
	return false
}
