package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Lean head parsing: the own loop's requests (front.go) and the cell's
// answers on the lean path (direct.go) are parsed here instead of by
// http.ReadRequest and http.ReadResponse, which allocate a dozen to twenty
// objects per head (a string per line and per value, the header map, its
// slices, the URL, the body and transfer structs) and were a fifth of the
// router's CPU. Here a head costs one string (all keys and values are
// substrings of it) and one backing array for the values; the request,
// its URL and both header maps are reused.
//
// Only plain heads are taken: a request line "METHOD /target HTTP/1.1", a
// status line "HTTP/1.1 NNN reason", header lines of a token, a colon and
// a value of visible ASCII, spaces and tabs. Anything else (folded lines,
// obs-text, control bytes, a target the URL parser would escape or
// unescape, and the headers whose handling has more cases: Content-Length
// on a request, Transfer-Encoding, Connection other than keep-alive,
// Pragma, Trailer) makes the parser return false, and the caller parses
// the same bytes with net/http as before. On what they take, the results
// equal net/http's field for field: TestLeanHeadsMatchNetHTTP and
// FuzzLeanHeads compare them.

// maxKeyCache bounds the per-connection cache of canonicalized keys.
const maxKeyCache = 32

// headParser holds what a connection reuses from head to head.
type headParser struct {
	h    http.Header       // cleared per head
	keys map[string]string // header names as sent -> canonical, for names not sent canonical
}

// tokenByte reports whether c may appear in a header name (RFC 9110 tchar).
func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// plainValueByte reports whether c may appear in a value the lean parser
// takes: visible ASCII, space, tab.
func plainValueByte(c byte) bool { return c == '\t' || (' ' <= c && c < 0x7f) }

// isCanonical reports whether a token is already in canonical MIME form.
func isCanonical(k string) bool {
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// canonical returns k's canonical form, without allocating for a name
// the connection sent before.
func (p *headParser) canonical(k string) string {
	if isCanonical(k) {
		return k
	}
	if c, ok := p.keys[k]; ok {
		return c
	}
	c := http.CanonicalHeaderKey(k)
	if p.keys == nil {
		p.keys = make(map[string]string, 4)
	}
	if len(p.keys) < maxKeyCache {
		p.keys[strings.Clone(k)] = c // k is a substring of a whole head
	}
	return c
}

// nextLine returns the line at the start of s without its LF or CRLF, and
// the rest; ok is false if s holds no LF.
func nextLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		return "", s, false
	}
	line, rest = s[:i], s[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest, true
}

// fields parses the header lines of s, up to and including the empty
// line, into p.h (cleared first), as textproto.ReadMIMEHeader would.
func (p *headParser) fields(s string) bool {
	if p.h == nil {
		p.h = make(http.Header, 16)
	}
	clear(p.h)
	// One backing array for the values, each a slice of capacity one so
	// an append by a later reader copies instead of overwriting the next.
	vals := make([]string, strings.Count(s, "\n"))
	for {
		line, rest, ok := nextLine(s)
		if !ok {
			return false
		}
		s = rest
		if line == "" {
			return s == ""
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		k := line[:colon]
		for i := 0; i < len(k); i++ {
			if !tokenByte(k[i]) {
				return false
			}
		}
		v := line[colon+1:]
		for i := 0; i < len(v); i++ {
			if !plainValueByte(v[i]) {
				return false
			}
		}
		v = strings.Trim(v, " \t")
		k = p.canonical(k)
		if vv, ok := p.h[k]; ok {
			p.h[k] = append(vv, v)
			continue
		}
		vals[0] = v
		p.h[k], vals = vals[:1:1], vals[1:]
	}
}

// has reports whether the parsed head holds any of keys.
func (p *headParser) has(keys ...string) bool {
	for _, k := range keys {
		if _, ok := p.h[k]; ok {
			return true
		}
	}
	return false
}

// requestParser parses the own loop's request heads into one reused
// request.
type requestParser struct {
	headParser
	req   http.Request
	url   url.URL
	blank http.Request // the zero request with the connection's context
}

// parse parses head (the whole head, empty line included) as
// http.ReadRequest would, into the reused request; false leaves it to
// http.ReadRequest.
func (p *requestParser) parse(head []byte) (*http.Request, bool) {
	s := string(head)
	line, rest, _ := nextLine(s)
	method, line, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || !plainMethod(method) || !plainTarget(target) {
		return nil, false
	}
	if !p.fields(rest) || p.has("Content-Length", "Transfer-Encoding", "Pragma") ||
		len(p.h["Host"]) > 1 || !onlyKeepAlive(p.h["Connection"]) {
		return nil, false
	}
	u := &p.url
	if !parseTarget(u, target) {
		var err error
		if u, err = url.ParseRequestURI(target); err != nil {
			return nil, false
		}
	}
	req := &p.req
	*req = p.blank
	req.Method = method
	req.RequestURI = target
	req.Proto, req.ProtoMajor, req.ProtoMinor = proto, 1, 1
	req.URL = u
	req.Header = p.h
	if hv := p.h["Host"]; len(hv) > 0 {
		req.Host = hv[0]
		delete(p.h, "Host") // as http.ReadRequest
	}
	req.Body = http.NoBody
	return req, true
}

// plainMethod reports whether m is an upper-case word (every method the
// lean path forwards).
func plainMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// plainTarget reports whether t is an origin-form target of visible
// ASCII.
func plainTarget(t string) bool {
	if t == "" || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// parseTarget fills u for a target whose path holds only characters
// url.ParseRequestURI keeps as they are (no escapes, nothing it would
// escape): Path is the path and RawPath empty. Other targets return
// false, for url.ParseRequestURI.
func parseTarget(u *url.URL, t string) bool {
	path, query, hasQuery := strings.Cut(t, "?")
	for i := 0; i < len(path); i++ {
		if !pathByte(path[i]) {
			return false
		}
	}
	*u = url.URL{Path: path}
	if hasQuery {
		if query == "" {
			u.ForceQuery = true
		} else {
			u.RawQuery = query
		}
	}
	return true
}

// pathByte reports whether c stands for itself in a URL path.
func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~$&+,/:;=@", c) >= 0
}

// responseParser parses the cell's answer heads on one direct connection.
type responseParser struct {
	headParser
	body lengthBody
}

// parse parses head as http.ReadResponse would for an answer to req,
// taking only final answers with a Content-Length to a GET; the body reads
// from br. The answer's Header is the parser's, valid until the next
// head: the lean path copies its values before it reads the body.
func (p *responseParser) parse(head []byte, req *http.Request, br *bufio.Reader) (*http.Response, bool) {
	if req.Method != http.MethodGet {
		return nil, false
	}
	s := string(head)
	line, rest, _ := nextLine(s)
	status, ok := strings.CutPrefix(line, "HTTP/1.1 ")
	if !ok || len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil, false
	}
	code := 0
	for i := range 3 {
		c := status[i]
		if c < '0' || c > '9' {
			return nil, false
		}
		code = 10*code + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	for i := 3; i < len(status); i++ {
		if !plainValueByte(status[i]) {
			return nil, false
		}
	}
	if !p.fields(rest) || p.has("Transfer-Encoding", "Connection", "Pragma", "Trailer") {
		return nil, false
	}
	cl, ok := contentLength(p.h["Content-Length"])
	if !ok {
		return nil, false
	}
	resp := &http.Response{Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: p.h, ContentLength: cl, Request: req, Body: http.NoBody}
	if cl > 0 {
		p.body = lengthBody{br: br, left: cl}
		resp.Body = &p.body
	}
	return resp, true
}

// contentLength parses a single Content-Length of at most 18 digits.
func contentLength(vv []string) (int64, bool) {
	if len(vv) != 1 || len(vv[0]) == 0 || len(vv[0]) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(vv[0]); i++ {
		c := vv[0][i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = 10*n + int64(c-'0')
	}
	return n, true
}

// lengthBody is a body of known length, read from the connection's
// reader as net/http's body: the read that ends it returns io.EOF with
// the last bytes, and a connection ending early is io.ErrUnexpectedEOF.
// Close is not used: directBody decides what happens to the connection.
type lengthBody struct {
	br   *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }
