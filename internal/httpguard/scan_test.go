package httpguard

import (
	"net"
	"testing"
)

// scanned feeds raw to a fresh Conn's scanner in reads of size step (0:
// whole) and returns it.
func scanned(raw string, step int) *Conn {
	c := &Conn{}
	c.st.reset()
	if step == 0 {
		step = len(raw)
	}
	for i := 0; i < len(raw) && c.st.state != scStopped; i += step {
		c.scan([]byte(raw[i:min(i+step, len(raw))]))
	}
	return c
}

func TestScanVerdicts(t *testing.T) {
	cases := []struct {
		name, head, method, target string
		want                       verdict
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "/", headOK},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", "GET", "/", headOK},
		{"leading CRLF", "\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", "POST", "/", headOK},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "POST", "/", headOK},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "POST", "/", headAmbiguous},
		{"TE and CL, odd case", "POST / HTTP/1.1\r\ntransfer-ENCODING: chunked\r\ncontent-length: 4\r\n\r\n", "POST", "/", headAmbiguous},
		{"TE on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "POST", "/", headAmbiguous},
		{"CL on HTTP/1.0", "POST / HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", "POST", "/", headOK},
		{"folded TE", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", "POST", "/", headObsFold},
		{"folded other header, tab", "GET / HTTP/1.1\r\nX-A: 1\r\n\t2\r\n\r\n", "GET", "/", headObsFold},
		{"body looks like a head", "POST / HTTP/1.1\r\nContent-Length: 30\r\n\r\nTransfer-Encoding: chunked\r\n x", "POST", "/", headOK},
		{"cut short: no verdict", "GET / HTTP/1.1\r\nHost: a\r\n", "GET", "/", headUnscanned},
		{"another request line", "GET /a HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "/b", headUnscanned},
	}
	for _, tc := range cases {
		// Whole, then byte by byte: the verdict cannot depend on how the
		// bytes were cut into reads.
		for _, step := range []int{0, 1} {
			if got := scanned(tc.head, step).take(lineKey(tc.method, tc.target)); got != tc.want {
				t.Errorf("%s (step %d): %d, want %d", tc.name, step, got, tc.want)
			}
		}
	}
}

// TestScanFollowsPipelines: heads behind bodies of either framing get
// their own verdicts, and a chunk the scanner cannot frame stops it, so
// the heads after it have none (refused: fail closed).
func TestScanFollowsPipelines(t *testing.T) {
	raw := "POST /1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" +
		"GET /3 HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n"
	for _, step := range []int{0, 1, 7} {
		c := scanned(raw, step)
		for _, want := range []struct {
			target string
			v      verdict
		}{{"/1", headOK}, {"/2", headOK}, {"/3", headObsFold}} {
			method := "POST"
			if want.target == "/3" {
				method = "GET"
			}
			if got := c.take(lineKey(method, want.target)); got != want.v {
				t.Errorf("step %d: %s %d, want %d", step, want.target, got, want.v)
			}
		}
	}
	c := scanned("POST /1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /2 HTTP/1.1\r\n\r\n", 0)
	if got := c.take(lineKey("POST", "/1")); got != headOK {
		t.Errorf("the head before a bad chunk: %d", got)
	}
	if got := c.take(lineKey("GET", "/2")); got != headUnscanned {
		t.Errorf("a head after a bad chunk: %d, want no verdict", got)
	}
}

// TestScanKeepsAtMostMaxAhead: past maxAhead unclaimed heads the oldest
// verdicts go, and their requests find none.
func TestScanKeepsAtMostMaxAhead(t *testing.T) {
	raw := ""
	for range maxAhead + 1 {
		raw += "GET /x HTTP/1.1\r\n\r\n"
	}
	raw = "GET /first HTTP/1.1\r\n\r\n" + raw
	c := scanned(raw, 0)
	if got := c.take(lineKey("GET", "/first")); got != headUnscanned {
		t.Errorf("the dropped oldest head: %d, want no verdict", got)
	}
}

// BenchmarkScan is the scan every request head pays: no allocation.
func BenchmarkScan(b *testing.B) {
	head := []byte("POST /orders HTTP/1.1\r\nHost: cell-1.internal:8080\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"Content-Length: 42\r\nContent-Type: application/json\r\nX-Request-Id: 5f2dd03621d4f9da-1\r\n" +
		"X-Tenant-ID: acme\r\nAccept-Encoding: gzip\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n" +
		`{"account_id":1,"amount_cents":100,"note":""}`)
	key := lineKey("POST", "/orders")
	c := &Conn{Conn: (net.Conn)(nil)}
	b.ReportAllocs()
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		c.st.reset()
		c.scan(head)
		if c.take(key) != headOK {
			b.Fatal("verdict")
		}
	}
}

// FuzzScanSplit: the scanner's verdicts and state cannot depend on how the
// stream is cut into reads, whatever the bytes.
func FuzzScanSplit(f *testing.F) {
	f.Add([]byte("POST /1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n"), 7)
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.0\r\n\r\n"), 30)
	f.Add([]byte("\r\nPOST / HTTP/1.0\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), 1)
	f.Fuzz(func(t *testing.T, raw []byte, cut int) {
		if cut < 0 || cut > len(raw) {
			return
		}
		whole, split := &Conn{}, &Conn{}
		whole.st.reset()
		split.st.reset()
		whole.scan(raw)
		if split.scan(raw[:cut]); split.st.state != scStopped {
			split.scan(raw[cut:])
		}
		if whole.st != split.st || whole.n != split.n || whole.ring != split.ring || whole.head != split.head {
			t.Fatalf("cut at %d: state %+v / %+v, %d / %d verdicts", cut, whole.st, split.st, whole.n, split.n)
		}
	})
}
