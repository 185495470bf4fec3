package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
)

// edgeAnswer is the first answer on a raw connection: its status and body.
type edgeAnswer struct {
	status int
	body   string
	ctype  string
}

// rawAnswer sends raw to addr on a new connection (half-closing the write
// side after it when halfClose) and reads the first answer.
func rawAnswer(t *testing.T, addr, raw string, halfClose bool) edgeAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return edgeAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return edgeAnswer{resp.StatusCode, string(b), resp.Header.Get("Content-Type")}
}

// TestEdgeParity holds the cell and the router to one answer per request:
// one corpus of raw requests goes to a real cell directly and through the
// router in front of it, and both answers must have the same status and
// the same RFC 9457 body, code included. The router refuses some of these
// itself (framing, versions, methods, the identity-header rule: package
// httpguard, shared with the cell) and forwards the others, whose answer
// is the cell's own; either way the client cannot tell which one spoke.
func TestEdgeParity(t *testing.T) {
	c, _, attacker := startHostileCell(t)
	mapFile := filepath.Join(t.TempDir(), "slotmap.json")
	writeSlotMapFile(t, mapFile, cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: c.url}}})
	r := startRouter(t, mapFile, "-config", writeRouterConfig(t, 0))

	const tenant = "X-Tenant-ID: attacker\r\n"
	post := func(extra, body string) string {
		return "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Type: application/json\r\n" + extra + "\r\n" + body
	}
	get := func(extra string) string {
		return fmt.Sprintf("GET /orders?account_id=%d HTTP/1.1\r\nHost: cell\r\n", attacker) + extra + "\r\n"
	}
	corpus := []struct {
		name, raw string
		halfClose bool
		code      string
	}{
		{name: "CL then TE", raw: post("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), code: "ambiguous_framing"},
		{name: "TE then CL", raw: post("Transfer-Encoding: chunked\r\nContent-Length: 60\r\n", "0\r\n\r\n"), code: "ambiguous_framing"},
		{name: "TE on HTTP/1.0", raw: "POST /orders HTTP/1.0\r\nHost: cell\r\n" + tenant + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", code: "ambiguous_framing"},
		{name: "folded Transfer-Encoding", raw: post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"), code: "obs_fold"},
		{name: "folded Content-Length", raw: post("Content-Length:\r\n\t2\r\n", "{}"), code: "obs_fold"},
		{name: "folded tenant header", raw: get("X-Tenant-ID: attacker\r\n victim\r\n"), code: "obs_fold"},
		{name: "folded other header", raw: get(tenant + "X-Note: a\r\n b\r\n"), code: "obs_fold"},
		{name: "Connection names the tenant header", raw: get("Connection: keep-alive, x-tenant-id\r\n" + tenant), code: "hop_by_hop_identity"},
		{name: "Connection names Authorization", raw: get("Connection: Authorization\r\n" + tenant), code: "hop_by_hop_identity"},
		{name: "Connection names Cookie", raw: get("Connection: close\r\nConnection: Cookie\r\n" + tenant), code: "hop_by_hop_identity"},
		{name: "HTTP/2 preface", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", code: "http_version_not_supported"},
		{name: "CONNECT", raw: "CONNECT cell:443 HTTP/1.1\r\nHost: cell:443\r\n\r\n", code: "method_not_allowed"},
		{name: "TRACE", raw: "TRACE / HTTP/1.1\r\nHost: cell\r\n\r\n", code: "method_not_allowed"},
		{name: "lower-case method", raw: strings.Replace(get(tenant), "GET", "get", 1), code: "method_not_implemented"},
		{name: "extension method", raw: "PROPFIND / HTTP/1.1\r\nHost: cell\r\n\r\n", code: "method_not_implemented"},
		{name: "bad chunk size", raw: post("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"), code: "bad_request_body"},
		{name: "chunked body cut short", raw: post("Transfer-Encoding: chunked\r\n", "10\r\n{\"account_id\""), halfClose: true, code: "bad_request_body"},
		{name: "CL over the body limit", raw: post("Content-Length: 9000\r\n", ""), code: "body_too_large"},
		{name: "no tenant", raw: "GET /orders?account_id=1 HTTP/1.1\r\nHost: cell\r\n\r\n", code: "tenant_missing"},
		{name: "text/plain body", raw: "POST /orders HTTP/1.1\r\nHost: cell\r\n" + tenant + "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", code: "unsupported_media_type"},
	}
	cellAddr, routerAddr := strings.TrimPrefix(c.url, "http://"), strings.TrimPrefix(r.url, "http://")
	for _, tc := range corpus {
		direct := rawAnswer(t, cellAddr, tc.raw, tc.halfClose)
		routed := rawAnswer(t, routerAddr, tc.raw, tc.halfClose)
		var p struct {
			Type, Title, Detail, Code string
			Status                    int
		}
		if err := json.Unmarshal([]byte(direct.body), &p); err != nil || p.Code != tc.code || p.Status != direct.status ||
			p.Type != "about:blank" || p.Title != http.StatusText(direct.status) || p.Detail == "" || direct.ctype != "application/problem+json" {
			t.Errorf("%s: the cell answered %d %s %q, want problem details with code %s", tc.name, direct.status, direct.ctype, direct.body, tc.code)
		}
		if routed != direct {
			t.Errorf("%s: through the router %d %s %q; the cell itself %d %s %q", tc.name,
				routed.status, routed.ctype, routed.body, direct.status, direct.ctype, direct.body)
		}
	}
}
