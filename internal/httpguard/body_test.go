package httpguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// bodyOutcome is how a guarded body read ended on the server.
type bodyOutcome struct {
	slow, malformed, failed, timedOut bool
	err                               error
}

// guardedServer serves one handler that reads the whole body through a
// Body with limits l (and a 16-byte http.MaxBytesReader under it), on the
// guarded listener, and reports each outcome.
func guardedServer(t *testing.T, l BodyLimits) (addr string, outcomes <-chan bodyOutcome) {
	t.Helper()
	ch := make(chan bodyOutcome, 8)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := NewBody(w, http.MaxBytesReader(w, r.Body, 16), l, time.Now())
		defer b.Finish()
		_, err := io.ReadAll(b)
		failed, timedOut := b.Failed()
		ch <- bodyOutcome{slow: BodyTooSlow(err), malformed: BodyMalformed(err), failed: failed, timedOut: timedOut, err: err}
		CloseAfter(w)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Listener = Listener{Listener: srv.Listener, HeaderTimeout: 5 * time.Second}
	Install(srv.Config)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), ch
}

func sendAndWait(t *testing.T, addr, raw string, halfClose bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_, _ = http.ReadResponse(bufio.NewReader(c), nil)
}

// TestBodyMarksItsFailures: a stall past the grace is too slow, a broken
// chunk or a body cut short is malformed, a body over a size limit is
// neither (the limit's own error), and a whole body is no failure.
func TestBodyMarksItsFailures(t *testing.T) {
	addr, outcomes := guardedServer(t, BodyLimits{Timeout: 2 * time.Second, Rate: 1000, Grace: 200 * time.Millisecond})
	head := "POST / HTTP/1.1\r\nHost: a\r\n"
	cases := []struct {
		name, raw string
		halfClose bool
		want      bodyOutcome
	}{
		{"whole", head + "Content-Length: 2\r\n\r\nok", false, bodyOutcome{}},
		{"stalled", head + "Content-Length: 10\r\n\r\nx", false, bodyOutcome{slow: true, failed: true, timedOut: true}},
		{"bad chunk", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", false, bodyOutcome{malformed: true, failed: true}},
		{"cut short", head + "Content-Length: 10\r\n\r\nabc", true, bodyOutcome{malformed: true, failed: true}},
		{"over the limit", head + "Content-Length: 20\r\n\r\n" + strings.Repeat("x", 20), false, bodyOutcome{failed: true}},
	}
	for _, tc := range cases {
		start := time.Now()
		sendAndWait(t, addr, tc.raw, tc.halfClose)
		got := <-outcomes
		if got.slow != tc.want.slow || got.malformed != tc.want.malformed || got.failed != tc.want.failed || got.timedOut != tc.want.timedOut {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if tc.want.slow && time.Since(start) > time.Second {
			t.Errorf("%s: cut after %s, want about the 200ms grace", tc.name, time.Since(start))
		}
	}
}

// TestHeadDeadlineFromFirstByte: on a keep-alive connection the next
// head is cut HeaderTimeout after its first byte. net/http alone starts
// that clock only at the head's fourth byte: three bytes sent slowly
// would hold the connection past it.
func TestHeadDeadlineFromFirstByte(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = Listener{Listener: srv.Listener, HeaderTimeout: timeout}
	srv.Config.ReadHeaderTimeout = timeout
	Install(srv.Config)
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	start := time.Now()
	for _, b := range []byte("GET") {
		if _, err := c.Write([]byte{b}); err != nil {
			break // cut off
		}
		time.Sleep(2 * timeout / 3)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = br.ReadByte()
	if err == nil {
		t.Fatal("the server answered a head of three bytes")
	}
	if took := time.Since(start); took > 3*timeout {
		t.Errorf("the connection closed %s after the head's first byte, want about %s", took, timeout)
	}
}
