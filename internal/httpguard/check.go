package httpguard

import (
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// Rules are the refusals of a parsed request, before anything is spent on
// it (Check).
type Rules struct {
	// identity are the headers a Connection header may not name, in
	// canonical form.
	identity []string
	// known: refuse every method but those of RFC 9110 §9 and PATCH.
	known bool
}

// NewRules returns the rules for a service whose tenant header is
// tenantHeader ("" when tenancy reads no header). knownMethodsOnly refuses
// extension methods too (the cell, which routes only known ones); without
// it an upper-case extension method passes (the router forwards it, and
// the cell answers it).
func NewRules(tenantHeader string, knownMethodsOnly bool) Rules {
	return Rules{identity: identityHeaders(tenantHeader), known: knownMethodsOnly}
}

// identityHeaders are the headers that carry who a request is: the tenant
// header (when there is one), Authorization and Cookie. A Connection
// header may not name them: a proxy drops what Connection names, so the
// router and the cell would see different identities.
func identityHeaders(tenantHeader string) []string {
	h := []string{"Authorization", "Cookie"}
	if tenantHeader != "" {
		h = append([]string{http.CanonicalHeaderKey(tenantHeader)}, h...)
	}
	return h
}

// Check returns the refusal of r, or nil to serve it; answer a refusal
// with the connection closed (CloseAfter). In order: the protocol
// version, the method, the head's verdict (Conn), a Connection header
// naming an identity header.
func (rl Rules) Check(r *http.Request) *Problem {
	if r.ProtoMajor != 1 {
		// "PRI * HTTP/2.0", the HTTP/2 preface, reaches handlers as a
		// request when the server does not speak HTTP/2 in clear text.
		return ErrVersion
	}
	switch {
	case r.Method == http.MethodConnect || r.Method == http.MethodTrace:
		return ErrMethodNotAllowed
	case rl.known && !knownMethod(r.Method), !upperToken(r.Method):
		return ErrMethodUnknown
	}
	switch headVerdictOf(r) {
	case headObsFold:
		return ErrObsFold
	case headAmbiguous:
		return ErrAmbiguousFraming
	case headUnscanned:
		return ErrUnscanned
	}
	if hopByHopIdentity(r.Header, rl.identity) {
		return ErrHopByHopIdentity
	}
	return nil
}

// hopByHopIdentity reports whether a Connection header of h names one of
// names (canonical form), in any case.
func hopByHopIdentity(h http.Header, names []string) bool {
	for _, v := range h["Connection"] {
		for len(v) > 0 {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = textproto.TrimString(tok)
			for _, name := range names {
				if strings.EqualFold(tok, name) {
					return true
				}
			}
		}
	}
	return false
}

// knownMethod reports the methods of RFC 9110 §9 and PATCH but CONNECT and
// TRACE.
func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// upperToken reports whether m is a token of upper-case letters, digits,
// '-' and '_' (every registered method is).
func upperToken(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CloseAfter makes the connection close once the answer is written,
// without reading what is left of the request: net/http drains up to 256
// KiB of an unread body after the handler, even when it closes, so a
// refused body would hold the connection until it arrived. The read
// deadline set now ends that drain at once. Call it before the answer's
// head is written.
func CloseAfter(w http.ResponseWriter) {
	w.Header()["Connection"] = closeValue
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// closeValue is shared by reference, never modified.
var closeValue = []string{"close"}
