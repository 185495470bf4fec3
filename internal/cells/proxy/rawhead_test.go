package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"

	"testing"
)

// scanAll runs a scanner over raw in pieces of size split (1 to 16
// bytes), as reads of a connection would deliver it.
func scanAll(raw []byte, split int) *scanConn {
	sc := newScanConn(nil)
	for i := 0; i < len(raw) && sc.st.state != scStopped; i += split {
		sc.scan(raw[i:min(i+split, len(raw))])
	}
	return sc
}

// oldest pops the oldest verdict, if any.
func (c *scanConn) oldest() (headVerdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return headVerdict{}, false
	}
	v := c.ring[c.head]
	c.head = (c.head + 1) % maxAhead
	c.n--
	return v, true
}

// FuzzRouterFront feeds a byte stream to the router's raw head scanner
// and to net/http's parser (http.ReadRequest and the body reader, the
// server's own) and checks that they frame it alike: for every request
// net/http parses and reads, in order, the scanner has the verdict of a
// head with the same request line, unless it gave up earlier (then the
// router refuses the rest of the connection: it fails closed). A bad
// verdict ends the comparison, as the router closes the connection there.
// The seeds (testdata/fuzz/FuzzRouterFront and those below) run in every
// go test.
func FuzzRouterFront(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\nHost: x\nTransfer-Encoding:\n chunked\n\n0\n\n",
		"POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET http://x/a?b HTTP/1.1\r\nHost: x\r\nX-F: a\r\n b\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(4))
	}
	f.Fuzz(func(t *testing.T, raw []byte, split uint8) {
		sc := scanAll(raw, int(split%16)+1)
		br := bufio.NewReader(bytes.NewReader(raw))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return // net/http answers 4xx/5xx and closes: nothing follows
			}
			v, ok := sc.oldest()
			if !ok {
				if sc.stopped {
					return // the router refuses this and every later request
				}
				t.Fatalf("net/http parsed %s %q, the scanner saw no head", req.Method, req.RequestURI)
			}
			if v.key != lineKey(req.Method, req.RequestURI) {
				t.Fatalf("net/http parsed %s %q, the scanner a different head", req.Method, req.RequestURI)
			}
			if v.bad {
				return // refused and closed
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return // a malformed body: 400 and closed
			}
		}
	})
}

func TestScannerVerdicts(t *testing.T) {
	cases := []struct {
		raw string
		bad []bool // per head, in order; the scanner stops after a bad one
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", []bool{false}},
		{"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", []bool{true}},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\ncontent-length: 1\r\n\r\n", []bool{true}},
		{"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", []bool{true}},
		{"POST / HTTP/1.1\r\nContent-Length: 1\r\n\t\r\n\r\n", []bool{true}},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", []bool{true}},
		{"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\nGET /2 HTTP/1.1\r\n\r\n", []bool{false, false}},
		{"POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n3;x\nabc\n0\n\nGET /2 HTTP/1.1\n\n", []bool{false, false}},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcPOST /2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /3 HTTP/1.1\r\n\r\n", []bool{false, false, false}},
	}
	for _, c := range cases {
		for _, split := range []int{1, 3, 1 << 20} {
			sc := scanAll([]byte(c.raw), split)
			for i, want := range c.bad {
				v, ok := sc.oldest()
				if !ok || v.bad != want {
					t.Errorf("%q split %d: head %d: verdict %v (held %v), want bad=%v", c.raw, split, i, v.bad, ok, want)
				}
			}
			if _, ok := sc.oldest(); ok {
				t.Errorf("%q split %d: more heads than %d", c.raw, split, len(c.bad))
			}
		}
	}
	if k := lineKey("GET", "/a?b"); k != scanAll([]byte("GET /a?b HTTP/1.1\r\n\r\n"), 2).ring[0].key {
		t.Error("the handler's key differs from the scanner's")
	}

}
