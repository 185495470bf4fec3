package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The lean path: a request without a body, that can be replayed and asks
// for no upgrade (the bulk of a router's traffic) is forwarded by
// backend.forward, which writes the outgoing head straight from the
// incoming request onto a direct connection and copies the answer back.
// It does what httputil.ReverseProxy with backend.rewrite does, minus the
// per-request copies ReverseProxy makes to get there: a clone of the
// request (header map, URL, context), a trace context for 1xx answers, a
// media type parse of every answer. Everything else (bodies, upgrades,
// https cells, cells with a base path) still goes through ReverseProxy.
//
// What must stay identical to the ReverseProxy path, and is tested on
// both: hop-by-hop headers (the fixed list and those named in Connection)
// are dropped both ways; the client's Forwarded and X-Forwarded-* headers
// are replaced by X-Forwarded-For (the incoming chain plus the client
// address), X-Forwarded-Host and X-Forwarded-Proto; Host, path, escapes
// and query are kept (query parameters ReverseProxy would drop as
// unparsable are dropped the same way); no Go default User-Agent is
// added; "Te: trailers" is kept; 1xx answers are passed on; trailers are
// passed on; SSE and bodies of unknown length have their head flushed at
// once, and every body write is flushed.

// forwardable reports whether r takes the lean path to this cell.
func (b *backend) forwardable(r *http.Request) bool {
	if !b.lean || r.ContentLength != 0 || (r.Body != nil && r.Body != http.NoBody) ||
		r.URL.Opaque != "" || len(r.Header["Upgrade"]) > 0 || strings.IndexByte(r.Host, '%') >= 0 {
		return false
	}
	return replayable(r)
}

// replayable reports whether a request without a body may be sent again
// after a pooled connection failed under it, as http.Transport decides.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
}

// forward sends r to the cell on the lean path and copies the answer to w.
func (b *backend) forward(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	resp, err := b.direct.send(r, b.writeHeadFn, func(code int, info http.Header) error {
		// As ReverseProxy: pass the 1xx on, then start the final answer's
		// header afresh, but with the cell header again.
		addHeader(h, info)
		w.WriteHeader(code)
		clear(h)
		h[b.p.cellHeader] = b.nameValue
		return nil
	}, true) // resp.Header is copied to h before the body is read
	if err != nil {
		b.onError(w, r, err)
		return
	}
	_ = b.onResponse(resp)
	dropHopByHop(resp.Header)
	addHeader(h, resp.Header)
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if resp.ContentLength < 0 || isEventStream(resp.Header["Content-Type"]) {
		_ = rc.Flush() // a stream: the client gets the head before any event
	}
	if err := b.copyBody(w, rc, resp.Body); err != nil {
		resp.Body.Close()
		// As ReverseProxy: the head is out, so the only honest answer is
		// to abort the client's connection.
		panic(http.ErrAbortHandler)
	}
	resp.Body.Close() // now, for the trailers
	if len(resp.Trailer) > 0 {
		_ = rc.Flush() // forces chunking, so the trailers can follow
	}
	if len(resp.Trailer) == announced {
		addHeader(h, resp.Trailer)
		return
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

// copyBody copies body to w, flushing every write so nothing the cell sent
// waits in the router.
func (b *backend) copyBody(w http.ResponseWriter, rc *http.ResponseController, body io.Reader) error {
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if !errors.Is(rerr, context.Canceled) {
				b.log.Warn("reading the cell's answer body failed", "error", rerr.Error())
			}
			return rerr
		}
	}
}

// writeHead writes the outgoing request head for the incoming r: what
// (*http.Request).Write writes for the request ReverseProxy would build
// with backend.rewrite.
func (b *backend) writeHead(bw *bufio.Writer, r *http.Request) error {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	if p := r.URL.EscapedPath(); p != "" {
		bw.WriteString(p)
	} else {
		bw.WriteByte('/')
	}
	if q := cleanQuery(r.URL.RawQuery); q != "" || r.URL.ForceQuery {
		bw.WriteByte('?')
		bw.WriteString(q)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	if r.Host != "" {
		bw.WriteString(r.Host)
	} else {
		bw.WriteString(b.target.Host)
	}
	bw.WriteString("\r\n")
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		writeField(bw, "User-Agent", ua[0]) // the first only, as Request.Write
	}
	conn := r.Header["Connection"]
	for k, vv := range r.Header {
		if requestSkips(k) || listedIn(conn, k) {
			continue
		}
		for _, v := range vv {
			writeField(bw, k, v)
		}
	}
	if listedIn(r.Header["Te"], "trailers") {
		bw.WriteString("Te: trailers\r\n")
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		bw.WriteString("X-Forwarded-For: ")
		for _, prior := range r.Header["X-Forwarded-For"] {
			writeValue(bw, prior)
			bw.WriteString(", ")
		}
		bw.WriteString(ip)
		bw.WriteString("\r\n")
	}
	writeField(bw, "X-Forwarded-Host", r.Host)
	if r.TLS == nil {
		bw.WriteString("X-Forwarded-Proto: http\r\n\r\n")
	} else {
		bw.WriteString("X-Forwarded-Proto: https\r\n\r\n")
	}
	return nil // a bufio error shows at Flush
}

// requestSkips reports whether an incoming header is not copied as is:
// hop-by-hop headers, the forwarding headers the router sets itself, and
// those Request.Write writes on its own (Host, User-Agent) or not at all
// for a request without a body.
func requestSkips(k string) bool {
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"Host", "User-Agent", "Content-Length":
		return true
	}
	return isHopByHop(k)
}

// isHopByHop reports whether k is one of ReverseProxy's fixed hop-by-hop
// headers.
func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// dropHopByHop removes the hop-by-hop headers of an answer, as
// ReverseProxy does: those named in Connection, then the fixed list.
func dropHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.Trim(tok, " \t"); tok != "" {
				delete(h, http.CanonicalHeaderKey(tok))
			}
		}
	}
	for k := range h {
		if isHopByHop(k) {
			delete(h, k)
		}
	}
}

// listedIn reports whether comma-separated header values (a Connection
// header's, a Te header's) hold the token k, in any case.
func listedIn(values []string, k string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(tok, " \t"), k) {
				return true
			}
		}
	}
	return false
}

// isEventStream reports whether a Content-Type is text/event-stream, with
// or without parameters.
func isEventStream(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	const es = "text/event-stream"
	v := strings.TrimLeft(ct[0], " \t")
	if len(v) < len(es) || !strings.EqualFold(v[:len(es)], es) {
		return false
	}
	rest := strings.TrimLeft(v[len(es):], " \t")
	return rest == "" || rest[0] == ';'
}

// addHeader appends src's values to dst, as ReverseProxy's copyHeader;
// a key dst lacks takes src's slice as is (src is discarded after).
func addHeader(dst, src http.Header) {
	for k, vv := range src {
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// writeField writes one header line.
func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	writeValue(bw, v)
	bw.WriteString("\r\n")
}

// writeValue writes a header value with CR and LF turned into spaces, as
// Request.Write does (the server never passes such a value on; this keeps
// a value set by other code from splitting the head).
func writeValue(bw *bufio.Writer, v string) {
	if !strings.ContainsAny(v, "\r\n") {
		bw.WriteString(v)
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		bw.WriteByte(c)
	}
}

// cleanQuery is httputil's cleanQueryParams: a query holding a semicolon
// or a malformed escape is re-encoded from what url.ParseQuery accepts.
func cleanQuery(s string) string {
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencodeQuery(s)
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return reencodeQuery(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func reencodeQuery(s string) string {
	v, _ := url.ParseQuery(s)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
