package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// cellView is what a parity cell saw of a request.
type cellView struct {
	Method string      `json:"method"`
	URI    string      `json:"uri"`
	Host   string      `json:"host"`
	Header http.Header `json:"header"`
}

// clientView is what the client got back.
type clientView struct {
	Status  int
	Header  http.Header
	Trailer http.Header
	Cell    cellView
}

// parityCell dumps the request it got and answers with hop-by-hop headers
// (fixed and named in Connection), a plain one and a trailer.
func parityCell(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Connection", "X-Hop-Resp")
	h.Set("X-Hop-Resp", "must not reach the client")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("X-Kept", "yes")
	h.Set("Trailer", "X-Sum")
	_ = json.NewEncoder(w).Encode(cellView{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header})
	h.Set("X-Sum", "42")
}

// rawCall sends a raw HTTP/1.1 request (so the test chooses every header
// byte) and reads the answer.
func rawCall(t *testing.T, addr, head string) clientView {
	t.Helper()
	conn := dialRaw(t, addr)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Method: "GET"} // ReadResponse needs the method for HEAD answers
	if head[:4] == "HEAD" {
		req.Method = "HEAD"
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	v := clientView{Status: resp.StatusCode, Header: resp.Header, Trailer: resp.Trailer}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &v.Cell); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	delete(v.Header, "Date")
	return v
}

// TestLeanPathMatchesReverseProxy sends the same raw requests through a
// router on the lean path and one forced onto httputil.ReverseProxy: the
// cell must see the same request (method, URI, Host, headers) and the
// client the same answer (status, headers, trailers).
func TestLeanPathMatchesReverseProxy(t *testing.T) {
	lean, rp := newFixture(t, ProxyConfig{}), newFixture(t, ProxyConfig{})
	for _, f := range []*fixture{lean, rp} {
		f.cells[1].extra = parityCell
	}
	for _, be := range rp.p.table.Load().backends {
		be.lean = false
	}
	heads := map[string]string{
		"hop-by-hop and forwarding headers": "GET /x/a%2Fb/c?q=x%20y&z=1 HTTP/1.1\r\nHost: acme.example.test\r\n" +
			"X-Tenant-ID: acme\r\nX-Request-ID: r1\r\nConnection: keep-alive, X-Hop-Req\r\nX-Hop-Req: 1\r\n" +
			"Keep-Alive: 300\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nTe: trailers, deflate\r\n" +
			"Forwarded: for=192.0.2.1\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 198.51.100.7\r\n" +
			"X-Forwarded-Host: evil.test\r\nX-Forwarded-Proto: https\r\nX-Multi: a\r\nX-Multi: b\r\nAccept: */*\r\n\r\n",
		"no user agent, odd query": "GET /x/q?a=1;b=2&c=%zz&d=4 HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r2\r\n\r\n",
		"user agent, forced query": "GET /x/f? HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r3\r\nUser-Agent: curl/8\r\nUser-Agent: second\r\n\r\n",
		"empty body declared":      "GET /x/e HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r7\r\nContent-Length: 0\r\n\r\n",
		"head":                     "HEAD /x/h HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r4\r\n\r\n",
		"options":                  "OPTIONS /x/o HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r5\r\n\r\n",
		"absolute form":            "GET http://r/x/abs?k=v HTTP/1.1\r\nHost: r\r\nX-Tenant-ID: acme\r\nX-Request-ID: r6\r\n\r\n",
	}
	for name, head := range heads {
		t.Run(name, func(t *testing.T) {
			got := rawCall(t, lean.router.Listener.Addr().String(), head)
			want := rawCall(t, rp.router.Listener.Addr().String(), head)
			if got.Status != 200 {
				t.Fatalf("lean path answered %d", got.Status)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("lean path:\n%s\nReverseProxy:\n%s", dump(got), dump(want))
			}
			if got.Header.Get("X-Hop-Resp") != "" || got.Header.Get("Keep-Alive") != "" || got.Header.Get("X-Kept") != "yes" {
				t.Errorf("answer headers %v", got.Header)
			}
			if head[:4] == "GET " && got.Trailer.Get("X-Sum") != "42" {
				t.Errorf("trailers %v", got.Trailer)
			}
		})
	}
}

func dump(v clientView) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return fmt.Sprint(string(b))
}

// reverseProxyOnly makes newFixture run the proxy with NetHTTPOnly (the
// router's -net-http-only), which sends every request through
// httputil.ReverseProxy, the path requests with a body take.
var reverseProxyOnly bool

// TestReverseProxyPath runs the request path tests again with the lean
// path off, so both paths keep the behaviour they check.
func TestReverseProxyPath(t *testing.T) {
	rerun(t, &reverseProxyOnly, map[string]func(*testing.T){
		"Routes":           TestProxyRoutesTenantsToTheirCells,
		"DownCell":         TestProxyDownCellAffectsOnlyItsTenants,
		"PassiveEjection":  TestProxyPassiveEjection,
		"Timeout":          TestProxyTimeout,
		"ConcurrencyCap":   TestProxyConcurrencyCap,
		"SSE":              TestProxyStreamsSSE,
		"KnownLength":      TestProxyFlushesKnownLengthBodies,
		"ClientGone":       TestDirectClientGoneAbortsTheCellRequest,
		"Informational":    TestDirectPassesInformationalAndTrailers,
		"ClientGoneStream": TestDirectClientGoneMidStream,
		"ClosedConns":      TestDirectRetriesConnectionsTheCellClosed,
	})
}

// rerun runs tests as subtests of t with *mode (a flag newFixture reads)
// set, and clears it when t ends.
func rerun(t *testing.T, mode *bool, tests map[string]func(*testing.T)) {
	*mode = true
	t.Cleanup(func() { *mode = false })
	for name, test := range tests {
		t.Run(name, test)
	}
}
