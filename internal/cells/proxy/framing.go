package proxy

import "net/http"

// The router's framing checks: requests it refuses itself, before any
// routing, on both serving paths (the own loop and net/http's server), so
// no cell ever sees them. They are the requests where the router and the
// cell could disagree about what the request is, or where forwarding
// would let a client hide a header from one of them:
//
//   - a method that is not an upper-case token (a lower-case "get" is a
//     different method to a strict server and the same to a lax one):
//     400;
//   - CONNECT (the router is no tunnel): 405; the HTTP/2 preface ("PRI *
//     HTTP/2.0", a client that took the router for an h2c server) and any
//     other protocol than HTTP/1.x: 400;
//   - a Connection header naming the tenant header, Authorization or
//     Cookie: the router would route by that header and then drop it as
//     hop-by-hop, so the cell would see another identity (or none): 400.
//
// Framing the parser already normalised (Content-Length with
// Transfer-Encoding, folded framing headers, Transfer-Encoding on
// HTTP/1.0) is checked on the raw head instead (rawhead.go).
//
// Each refusal closes the connection: after a request the router will
// not forward, it cannot know where the next one starts.

// refusal is a pre-encoded answer of the router's own.
type refusal struct {
	status int
	body   []byte
}

var (
	refuseMethod     = &refusal{http.StatusBadRequest, []byte(`{"error":"the request method is not an upper-case token","code":"bad_method"}` + "\n")}
	refuseConnect    = &refusal{http.StatusMethodNotAllowed, []byte(`{"error":"CONNECT is not served","code":"method_not_allowed"}` + "\n")}
	refuseProto      = &refusal{http.StatusBadRequest, []byte(`{"error":"only HTTP/1.x is served","code":"bad_protocol"}` + "\n")}
	refuseConnection = &refusal{http.StatusBadRequest, []byte(`{"error":"the Connection header names a header that carries identity","code":"bad_connection_header"}` + "\n")}
	refuseFramingRaw = &refusal{http.StatusBadRequest, []byte(`{"error":"the request's framing is ambiguous","code":"bad_framing"}` + "\n")}
)

// protectedHeaders are the headers a Connection header may not name:
// those that carry a tenant's identity to the cell.
func protectedHeaders(tenantHeader string) []string {
	return []string{http.CanonicalHeaderKey(tenantHeader), "Authorization", "Cookie"}
}

// refuseFraming returns the router's refusal of r, or nil to serve it.
// On the plain requests that are most of the traffic it costs a method
// scan and one map lookup.
func refuseFraming(r *http.Request, protected []string) *refusal {
	if !upperToken(r.Method) {
		return refuseMethod
	}
	if r.ProtoMajor != 1 || r.Method == "PRI" {
		return refuseProto
	}
	if r.Method == http.MethodConnect {
		return refuseConnect
	}
	if conn := r.Header["Connection"]; len(conn) > 0 {
		for _, k := range protected {
			if listedIn(conn, k) {
				return refuseConnection
			}
		}
	}
	return nil
}

// upperToken reports whether m is a token of upper-case letters, digits
// and '-' or '_' (every registered method; RFC 9110 methods are
// case-sensitive tokens).
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

// writeBadRequest answers a refusal and closes the connection.
func writeBadRequest(w http.ResponseWriter, r *http.Request, f *refusal) {
	setRequestID(w, r)
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Connection"] = closeValue
	w.WriteHeader(f.status)
	_, _ = w.Write(f.body)
}
