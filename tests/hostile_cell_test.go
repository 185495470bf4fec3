package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellgate/cellgate/gen"
)

// hostileCellConfig is the per-cell file of the hostile-client tests:
// short head and body deadlines (so the slow clients finish in seconds)
// and a small body limit (so an oversized chunked body is cheap to send).
const hostileCellConfig = `{"server": {
	"read_header_timeout": "1s",
	"read_timeout": "10s",
	"body_read_timeout": "3s",
	"body_min_bytes_per_second": 1000,
	"body_rate_grace": "500ms",
	"body_limit_bytes": 8192
}}`

// startHostileCell boots a cell on fresh databases with hostileCellConfig
// and signs up one account each for the victim and the attacker tenants.
func startHostileCell(t *testing.T) (c *cell, victimAccount, attackerAccount int64) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cell.json")
	if err := os.WriteFile(file, []byte(hostileCellConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c = startCell(t, cellEnv(t), "serve", "-config", file)
	c.waitStatus(t, "/readyz", 200, 30*time.Second)
	signUp := func(tenant string) int64 {
		status, body := c.do(t, "POST", "/signup", tenant, `{"email":"owner@`+tenant+`.test","name":"Owner"}`)
		if status != http.StatusCreated {
			t.Fatalf("sign-up of %s: %d %s", tenant, status, body)
		}
		var acct struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(body, &acct); err != nil {
			t.Fatal(err)
		}
		return acct.ID
	}
	return c, signUp("victim"), signUp("attacker")
}

// TestCellAnswersBadInputWith4xx: ordinary bad input is the client's
// error, never a 500: the database's refusals (foreign key, invalid text,
// unique) are mapped by the runtime, lengths are the app's validation, and
// the binder takes one JSON value of type application/json.
func TestCellAnswersBadInputWith4xx(t *testing.T) {
	c, _, acct := startHostileCell(t)
	post := func(path, ctype, body string) (int, string) {
		req, err := http.NewRequest("POST", c.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Tenant-ID", "attacker")
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	long := strings.Repeat("a", 3000)
	cases := []struct {
		name, path, ctype, body string
		status                  int
		code                    string
	}{
		{"order of an unknown account", "/orders", "application/json", `{"account_id":999999999,"amount_cents":100}`, 422, "reference_not_found"},
		{"NUL in an email", "/signup", "application/json", `{"email":"a\u0000b@x.test"}`, 400, "invalid_text"},
		{"NUL in a note", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":1,"note":"\u0000"}`, acct), 400, "invalid_text"},
		{"3 KB email", "/signup", "application/json", `{"email":"` + long + `@x.test"}`, 400, "invalid_request"},
		{"3 KB name", "/signup", "application/json", `{"email":"n@x.test","name":"` + long + `"}`, 400, "invalid_request"},
		{"3 KB note", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":1,"note":"%s"}`, acct, long), 400, "invalid_request"},
		{"email taken", "/signup", "application/json", `{"email":"owner@attacker.test"}`, 409, "already_exists"},
		{"trailing JSON", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":1}{"account_id":1}`, acct), 400, "trailing_data"},
		{"text/plain", "/orders", "text/plain", fmt.Sprintf(`{"account_id":%d,"amount_cents":1}`, acct), 415, "unsupported_media_type"},
		{"form body", "/signup", "application/x-www-form-urlencoded", `email=f@x.test`, 415, "unsupported_media_type"},
		{"amount as a string", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":"1"}`, acct), 400, "invalid_request"},
		{"negative amount", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":-1}`, acct), 400, "invalid_request"},
		{"amount beyond int64", "/orders", "application/json", fmt.Sprintf(`{"account_id":%d,"amount_cents":1e30}`, acct), 400, "invalid_request"},
	}
	for _, tc := range cases {
		status, body := post(tc.path, tc.ctype, tc.body)
		var b struct{ Detail, Code string }
		_ = json.Unmarshal([]byte(body), &b)
		if status != tc.status || b.Code != tc.code || b.Detail == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
		if strings.Contains(body, "violates") || strings.Contains(body, "SQLSTATE") || strings.Contains(body, "orders_") {
			t.Errorf("%s: the answer leaks the database's words: %s", tc.name, body)
		}
	}
	if status, body := c.do(t, "GET", "/account?id=999999999", "attacker", ""); status != 404 {
		t.Errorf("unknown account: %d %s", status, body)
	}
	// The generated validation names every failing field, and the cell
	// serves its OpenAPI documents without a tenant.
	if status, body := post("/orders", "application/json", `{"account_id":-1,"amount_cents":-1,"extra":1}`); status != 400 ||
		!strings.Contains(body, `"errors":[{"field":"extra","in":"body","reason":"is not a field of this request"}]`) {
		t.Errorf("unknown field: %d %s", status, body)
	}
	if status, body := post("/orders", "application/json", `{"account_id":-1,"amount_cents":-1}`); status != 400 ||
		!strings.Contains(body, `{"field":"account_id","in":"body","reason":"must be greater than 0"},{"field":"amount_cents","in":"body","reason":"must be at least 0"}`) {
		t.Errorf("two bad fields: %d %s", status, body)
	}
	for path, want := range map[string][]byte{"/openapi.json": gen.OpenAPI, "/openapi-3.0.json": gen.OpenAPI30} {
		if status, body := c.do(t, "GET", path, "", ""); status != 200 || !bytes.Equal(body, want) {
			t.Errorf("GET %s without a tenant: %d, %d bytes, want 200 and gen's %d bytes", path, status, len(body), len(want))
		}
	}
	if strings.Contains(c.Logs(), `"handler error"`) {
		t.Errorf("a client's input was logged as a handler error:\n%s", grepLines(c.Logs(), "handler error"))
	}
}

// cellHostile is one raw request of the corpus.
type cellHostile struct {
	name string
	raw  string
	// send, when set, writes the request instead of raw (slow clients).
	send func(net.Conn) error
	// halfClose shuts the write side after raw.
	halfClose bool
	// status is the first answer's status; 0 means no answer, the
	// connection closed.
	status int
	// closed requires the connection to be closed after the answer.
	closed bool
	// within, when set, is how soon after the first byte the connection
	// must be closed (a slow client's cut); it also bounds the wait for it.
	within time.Duration
}

// trickle writes s one byte per gap until the server closes.
func trickle(s string, gap time.Duration) func(net.Conn) error {
	return func(c net.Conn) error {
		for i := range len(s) {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return nil // cut off: what the test wants to see
			}
			time.Sleep(gap)
		}
		return nil
	}
}

// runCellHostile sends h on a new connection and returns the first answer's
// status (0: none), whether the server closed the connection and when.
func runCellHostile(t *testing.T, addr string, h cellHostile) (int, bool, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		if h.send != nil {
			done <- h.send(c)
			return
		}
		_, err := io.WriteString(c, h.raw)
		if err == nil && h.halfClose {
			err = c.(*net.TCPConn).CloseWrite()
		}
		done <- err
	}()
	_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
	br := bufio.NewReader(c)
	status := 0
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Anything after the answer: a next answer means the
		// connection stayed open for the bytes that followed.
		wait := 300 * time.Millisecond
		if h.within > 0 {
			wait = time.Until(start.Add(h.within + time.Second))
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err = io.Copy(io.Discard, br) // nil at EOF: closed
		if err == nil {
			err = io.EOF
		}
	}
	var ne net.Error
	closed := err != nil && !(errors.As(err, &ne) && ne.Timeout())
	took := time.Since(start)
	_ = c.Close() // ends a trickling sender
	<-done
	return status, closed, took
}

// cellHostileCorpus is the cell's own raw-socket corpus: smuggling variants,
// malformed and stalled bodies, huge heads, hop-by-hop tricks, slow heads
// and bad input in the body. attacker is the attacking tenant's account.
func cellHostileCorpus(attacker int64) []cellHostile {
	const tenant = "X-Tenant-ID: attacker\r\n"
	order := fmt.Sprintf(`{"account_id":%d,"amount_cents":1}`, attacker)
	post := func(extra, body string) string {
		return "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Type: application/json\r\n" + extra + "\r\n" + body
	}
	withCL := func(body string) string { return post(fmt.Sprintf("Content-Length: %d\r\n", len(body)), body) }
	chunked := func(chunks string) string { return post("Transfer-Encoding: chunked\r\n", chunks) }
	next := "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\n" + tenant + "\r\n"
	big := strings.Repeat("x", 10000)
	return []cellHostile{
		// Smuggling: framing net/http accepts and forgets.
		{name: "CL then TE", raw: post("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"+next), status: 400, closed: true},
		{name: "TE then CL", raw: post("Transfer-Encoding: chunked\r\nContent-Length: 60\r\n", "0\r\n\r\n"+next), status: 400, closed: true},
		{name: "HTTP/1.0 keep-alive with TE", raw: "POST /orders HTTP/1.0\r\nHost: cell\r\nConnection: keep-alive\r\n" + tenant + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + next, status: 400, closed: true},
		{name: "HTTP/1.0 with TE only", raw: "POST /orders HTTP/1.0\r\nHost: cell\r\n" + tenant + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, closed: true},
		{name: "folded Transfer-Encoding", raw: post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"+next), status: 400, closed: true},
		{name: "folded Content-Length", raw: post("Content-Length:\r\n\t2\r\n", "{}"+next), status: 400, closed: true},
		{name: "folded tenant header", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nX-Tenant-ID: attacker\r\n victim\r\n\r\n", status: 400, closed: true},
		{name: "TE gzip, chunked", raw: post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"), status: 501, closed: true},
		{name: "TE identity", raw: post("Transfer-Encoding: identity\r\n", ""), status: 501, closed: true},
		{name: "two TE headers", raw: post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), status: 501, closed: true},
		{name: "TE with a space before the colon", raw: post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"), status: 400, closed: true},
		{name: "two different CL", raw: post("Content-Length: 2\r\nContent-Length: 3\r\n", "{} "), status: 400, closed: true},
		{name: "negative CL", raw: post("Content-Length: -1\r\n", ""), status: 400, closed: true},
		{name: "CL with a plus", raw: post("Content-Length: +2\r\n", "{}"), status: 400, closed: true},
		{name: "CL in hex", raw: post("Content-Length: 0x2\r\n", "{}"), status: 400, closed: true},
		// Hop-by-hop tricks: a proxy would strip what Connection names.
		{name: "Connection names the tenant header", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nConnection: X-Tenant-ID\r\n" + tenant + "\r\n", status: 400, closed: true},
		{name: "Connection names it in lower case, second", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nConnection: keep-alive, x-tenant-id\r\n" + tenant + "\r\n", status: 400, closed: true},
		{name: "Connection names Authorization", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nConnection: Authorization\r\n" + tenant + "\r\n", status: 400, closed: true},
		{name: "Connection names Cookie in a second header", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nConnection: close\r\nConnection: Cookie\r\n" + tenant + "\r\n", status: 400, closed: true},
		// Malformed bodies.
		{name: "bad chunk size", raw: chunked("zz\r\n{}\r\n0\r\n\r\n"), status: 400},
		{name: "chunk size overflow", raw: chunked("fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n"), status: 400},
		{name: "chunk without CRLF", raw: chunked("2\r\n{}XX0\r\n\r\n"), status: 400},
		{name: "chunked body cut by half-close", raw: chunked("10\r\n{\"account_id\""), halfClose: true, status: 400},
		{name: "CL body cut by half-close", raw: post("Content-Length: 100\r\n", `{"account_id":1`), halfClose: true, status: 400},
		{name: "CL over the body limit", raw: post("Content-Length: 9000\r\n", ""), status: 413, closed: true},
		{name: "chunked over the body limit", raw: chunked(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big)+10, `{"note":"`+big+`"}`)), status: 413, closed: true},
		{name: "trailing JSON value", raw: withCL(order + order), status: 400},
		{name: "trailing garbage chunked", raw: chunked(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(order)+4, order+"GET ")), status: 400},
		{name: "text/plain body", raw: "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Type: text/plain\r\nContent-Length: " + fmt.Sprint(len(order)) + "\r\n\r\n" + order, status: 415},
		{name: "no content type", raw: "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Length: " + fmt.Sprint(len(order)) + "\r\n\r\n" + order, status: 415},
		{name: "unknown account", raw: withCL(`{"account_id":987654321,"amount_cents":1}`), status: 422},
		{name: "NUL in a note", raw: withCL(fmt.Sprintf(`{"account_id":%d,"amount_cents":1,"note":"\u0000"}`, attacker)), status: 400},
		{name: "invalid UTF-8 in a note", raw: withCL(fmt.Sprintf(`{"account_id":%d,"amount_cents":1,"note":"`+"\xff\xfe"+`"}`, attacker)), status: 201},
		// Heads net/http refuses itself.
		{name: "head over 1 MiB", raw: "GET / HTTP/1.1\r\nHost: cell\r\nX-Big: " + strings.Repeat("b", 1<<20+8192) + "\r\n\r\n", status: 431, closed: true},
		{name: "garbage request line", raw: "GARBAGE\r\n\r\n", status: 400, closed: true},
		{name: "HTTP/2 preface", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: 505, closed: true},
		{name: "HTTP/1.1 without Host", raw: "GET / HTTP/1.1\r\n\r\n", status: 400, closed: true},
		{name: "bad Host", raw: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400, closed: true},
		{name: "space in a header name", raw: "GET / HTTP/1.1\r\nHost: cell\r\nX-A B: 1\r\n\r\n", status: 400, closed: true},
		{name: "NUL in a header value", raw: "GET / HTTP/1.1\r\nHost: cell\r\nX-A: a\x00b\r\n\r\n", status: 400, closed: true},
		{name: "CR in a header value", raw: "GET / HTTP/1.1\r\nHost: cell\r\nX-A: a\rb\r\n\r\n", status: 400, closed: true},
		{name: "CONNECT", raw: "CONNECT cell:443 HTTP/1.1\r\nHost: cell:443\r\n\r\n", status: 405, closed: true},
		{name: "TRACE", raw: "TRACE / HTTP/1.1\r\nHost: cell\r\n\r\n", status: 405, closed: true},
		{name: "lower-case method", raw: "get /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\n" + tenant + "\r\n", status: 501, closed: true},
		{name: "extension method", raw: "PROPFIND / HTTP/1.1\r\nHost: cell\r\n\r\n", status: 501, closed: true},
		// Tenancy tricks.
		{name: "tenant header twice", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nX-Tenant-ID: attacker\r\nX-Tenant-ID: victim\r\n\r\n", status: 400},
		{name: "tenant id with a path", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\nX-Tenant-ID: ../victim\r\n\r\n", status: 400},
		// Slow clients.
		// net/http answers a head cut mid-way 400; read_header_timeout
		// is 1 s.
		{name: "head trickled", send: trickle("GET / HTTP/1.1\r\nHost: cell\r\nX-A: "+strings.Repeat("a", 40)+"\r\n\r\n", 100*time.Millisecond), status: 400, closed: true, within: 1500 * time.Millisecond},
		{name: "head of three bytes, then silence", raw: "GET", status: 400, closed: true, within: 1500 * time.Millisecond},
		{name: "second head trickled on keep-alive", send: func(c net.Conn) error {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: cell\r\n\r\n"); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			return trickle("GET / HTTP/1.1\r\nHost: cell\r\nX-A: "+strings.Repeat("a", 40)+"\r\n\r\n", 100*time.Millisecond)(c)
		}, status: 200, closed: true, within: 1700 * time.Millisecond},
		{name: "stalled body", raw: post("Content-Length: 200\r\n", "{"), status: 408, closed: true, within: 1500 * time.Millisecond},
		{name: "stalled body, refused unread", raw: "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Type: text/plain\r\nContent-Length: 200\r\n\r\n{", status: 415, closed: true, within: 1500 * time.Millisecond},
		{name: "body at 20 bytes a second", send: func(c net.Conn) error {
			if _, err := io.WriteString(c, post("Content-Length: 2000\r\n", "")); err != nil {
				return err
			}
			return trickle(`{"note":"`+strings.Repeat("n", 1900), 50*time.Millisecond)(c)
		}, status: 408, closed: true, within: 3500 * time.Millisecond},
	}
}

// TestCellHostileCorpus sends the corpus at a real cell, one connection
// each, while a victim tenant polls every 100 ms: every cellHostile request
// gets its answer (or its cut), and no victim request fails, during or
// after any of them.
func TestCellHostileCorpus(t *testing.T) {
	c, victim, attacker := startHostileCell(t)
	addr := strings.TrimPrefix(c.url, "http://")

	var polls, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/orders?account_id=%d", c.url, victim), nil)
			req.Header.Set("X-Tenant-ID", "victim")
			resp, err := client.Do(req)
			polls.Add(1)
			if err != nil {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, fmt.Sprintf("status %d", resp.StatusCode))
			}
		}
	}()

	corpus := cellHostileCorpus(attacker)
	if len(corpus) < 30 {
		t.Fatalf("the corpus has %d requests, want at least 30", len(corpus))
	}
	for _, h := range corpus {
		status, closed, took := runCellHostile(t, addr, h)
		if status != h.status || (h.closed && !closed) {
			t.Errorf("%s: answered %d (closed %v), want %d (closed %v)", h.name, status, closed, h.status, h.closed)
		}
		if h.within > 0 && took > h.within {
			t.Errorf("%s: cut after %s, want within %s", h.name, took, h.within)
		}
		if status >= 500 && status != http.StatusNotImplemented && status != http.StatusHTTPVersionNotSupported {
			t.Errorf("%s: a server error for a client's request: %d", h.name, status)
		}
		if http.StatusText(status) == "" && status != 0 {
			t.Errorf("%s: non-standard status %d on the wire", h.name, status)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d cellHostile requests; victim: %d polls, %d failed", len(corpus), polls.Load(), failed.Load())
	if polls.Load() < 20 {
		t.Fatalf("the victim polled only %d times", polls.Load())
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d victim requests failed during the attack; first: %v", n, polls.Load(), firstFailure.Load())
	}
	if strings.Contains(c.Logs(), `"handler error"`) || strings.Contains(c.Logs(), "panic") {
		t.Errorf("the corpus caused handler errors:\n%s", grepLines(c.Logs(), "error"))
	}
}
