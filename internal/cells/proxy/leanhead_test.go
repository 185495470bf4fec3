package proxy

import (
	"bufio"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Request heads: the first ones must take the lean parser.
var (
	plainRequestHeads = []string{
		"GET / HTTP/1.1\r\nHost: router.test\r\n\r\n",
		"GET /x/ok?page=2&q=a%20b HTTP/1.1\r\nHost: r:8080\r\nUser-Agent: Go-http-client/1.1\r\nX-Tenant-ID: acme\r\nAccept-Encoding: gzip\r\n\r\n",
		"HEAD /a/b;c=d/@x:y$z HTTP/1.1\nHost: r\nx-request-id:   fixed \t\nConnection: keep-alive\n\n",
		"GET /? HTTP/1.1\r\nHost: r\r\nAccept: a\r\naccept: b\r\nX-Empty:\r\n\r\n",
		"OPTIONS //double HTTP/1.1\r\nHost: r\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n\r\n",
	}
	otherRequestHeads = []string{
		"GET /%7Euser HTTP/1.1\r\nHost: r\r\n\r\n", // escapes: url.ParseRequestURI, still fast
		"GET /a!b'(c)*#f HTTP/1.1\r\nHost: r\r\n\r\n",
		"GET /a?b?c HTTP/1.1\r\nHost: r\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: r\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nX : a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nX: \xc3\xa9\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: r\r\nX: a\rb\r\n\r\n",
		"GET  / HTTP/1.1\r\nHost: r\r\n\r\n",
		"get / HTTP/1.1\r\nHost: r\r\n\r\n",
		"GET http://r/ HTTP/1.1\r\nHost: r\r\n\r\n",
		"GET / HTTP/1.1 \r\nHost: r\r\n\r\n",
		"GET / HTTP/1.1\r\n Host: r\r\n\r\n",
	}
)

// checkRequestHead parses head with the lean parser and, if it takes it,
// with http.ReadRequest, and fails on any difference. It reports whether
// the lean parser took it.
func checkRequestHead(t *testing.T, head string) bool {
	t.Helper()
	var p requestParser
	got, ok := p.parse([]byte(head))
	if !ok {
		return false
	}
	want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
	if err != nil {
		t.Fatalf("%q: lean parser took a head net/http rejects: %v", head, err)
	}
	type view struct {
		Method, RequestURI, Proto, Host string
		Major, Minor                    int
		URL                             any
		Header                          http.Header
		Close                           bool
		ContentLength                   int64
		TE                              []string
		Trailer                         http.Header
		NoBody                          bool
	}
	v := func(r *http.Request) view {
		return view{r.Method, r.RequestURI, r.Proto, r.Host, r.ProtoMajor, r.ProtoMinor, *r.URL, r.Header,
			r.Close, r.ContentLength, r.TransferEncoding, r.Trailer, r.Body == http.NoBody}
	}
	if g, w := v(got), v(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\nlean:     %+v\nnet/http: %+v", head, g, w)
	}
	return true
}

// Answer heads, with a body; the first ones must take the lean parser.
var (
	plainResponseHeads = []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nVary: Origin\r\nX-Request-Id: r-1\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
		"HTTP/1.1 404 Not Found\nContent-Length: 0\nset-cookie: a=1\nSet-Cookie: b=2\n\n",
		"HTTP/1.1 599\r\nContent-Length: 3\r\nX-Odd:  v \t\r\n\r\nodd",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", // the cell closes early
	}
	otherResponseHeads = []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 20x OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
	}
)

// checkResponseHead is checkRequestHead for an answer to a GET, bodies
// included.
func checkResponseHead(t *testing.T, msg string) bool {
	t.Helper()
	end := headEnd([]byte(msg))
	if end < 0 {
		return false
	}
	req := &http.Request{Method: "GET"}
	var p responseParser
	br := bufio.NewReader(strings.NewReader(msg[end:]))
	got, ok := p.parse([]byte(msg[:end]), req, br)
	if !ok {
		return false
	}
	want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(msg)), req)
	if err != nil {
		t.Fatalf("%q: lean parser took a head net/http rejects: %v", msg, err)
	}
	type view struct {
		Status, Proto      string
		Code, Major, Minor int
		Header, Trailer    http.Header
		ContentLength      int64
		Close, Uncompr     bool
		TE                 []string
		Body               string
		BodyErr            string
	}
	v := func(r *http.Response) view {
		b, err := io.ReadAll(r.Body)
		es := ""
		if err != nil {
			es = err.Error()
		}
		return view{r.Status, r.Proto, r.StatusCode, r.ProtoMajor, r.ProtoMinor, r.Header, r.Trailer, r.ContentLength,
			r.Close, r.Uncompressed, r.TransferEncoding, string(b), es}
	}
	if g, w := v(got), v(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\nlean:     %+v\nnet/http: %+v", msg, g, w)
	}
	return true
}

// TestLeanHeadsMatchNetHTTP: what the lean parsers take, they parse as
// net/http does; the plain heads take them.
func TestLeanHeadsMatchNetHTTP(t *testing.T) {
	for _, h := range plainRequestHeads {
		if !checkRequestHead(t, h) {
			t.Errorf("%q: the lean parser did not take it", h)
		}
	}
	for _, h := range otherRequestHeads {
		checkRequestHead(t, h)
	}
	for _, h := range plainResponseHeads {
		if !checkResponseHead(t, h) {
			t.Errorf("%q: the lean parser did not take it", h)
		}
	}
	for _, h := range otherResponseHeads {
		if checkResponseHead(t, h) {
			t.Errorf("%q: the lean parser took it", h)
		}
	}
}

// FuzzLeanHeads checks the lean parsers against net/http on arbitrary
// heads (go test -fuzz FuzzLeanHeads).
func FuzzLeanHeads(f *testing.F) {
	for _, h := range append(plainRequestHeads, otherRequestHeads...) {
		f.Add(h)
	}
	for _, h := range append(plainResponseHeads, otherResponseHeads...) {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if end := headEnd([]byte(s)); end == len(s) {
			checkRequestHead(t, s)
		}
		checkResponseHead(t, s)
	})
}

// TestLeanHeadsAllocs: a plain request head costs its string and its
// values' array; an answer head those and the Response.
func TestLeanHeadsAllocs(t *testing.T) {
	var rp requestParser
	head := []byte(plainRequestHeads[1])
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := rp.parse(head); !ok {
			t.Fatal("not taken")
		}
	}); n > 2 {
		t.Errorf("request head: %v allocations, want at most 2", n)
	}
	var pp responseParser
	msg := plainResponseHeads[0]
	end := headEnd([]byte(msg))
	ans := []byte(msg[:end])
	req := &http.Request{Method: "GET"}
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := pp.parse(ans, req, nil); !ok {
			t.Fatal("not taken")
		}
	}); n > 3 {
		t.Errorf("answer head: %v allocations, want at most 3", n)
	}
}
