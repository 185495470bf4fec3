package routerconsole

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/cells/router"
)

// fakeSource is a Source whose answers a test sets.
type fakeSource struct {
	mu    sync.Mutex
	cells []router.CellStatus
	sm    router.SlotMapStatus
}

func (f *fakeSource) Cells() []router.CellStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]router.CellStatus(nil), f.cells...)
}

func (f *fakeSource) SlotMapStatus() router.SlotMapStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sm
}

func (f *fakeSource) set(name string, fn func(*router.CellStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.cells {
		if f.cells[i].Name == name {
			fn(&f.cells[i])
		}
	}
}

// testToken is the router console's token in these tests.
const testToken = "router-token-0123456789abcdef0123456789"

type env struct {
	c     *Console
	src   *fakeSource
	now   *time.Time
	audit *bytes.Buffer
	srv   *httptest.Server
}

func newEnv(tb testing.TB, configure ...func(*Config)) *env {
	tb.Helper()
	now := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	src := &fakeSource{
		cells: []router.CellStatus{
			{Name: "cell-1", URL: "http://10.0.0.1:8080", Console: "http://10.0.0.1:8080/admin/", Slots: []string{"0-8191"}, Up: true},
			{Name: "cell-<2>", URL: "http://10.0.0.2:8080", Console: "http://10.0.0.2:8080/admin/", Slots: []string{"8192-16383"}, Up: true},
		},
		sm: router.SlotMapStatus{Generation: 3, Digest: strings.Repeat("ab", 32), Since: now, Current: true,
			Map:     cells.SlotMap{Cells: []cells.CellSpec{{Name: "cell-1", URL: "http://10.0.0.1:8080", Slots: []string{"0-8191"}}}, Frozen: []string{"100-199"}},
			Reloads: []router.Reload{{At: now, Result: "invalid", Generation: 3, Digest: strings.Repeat("ab", 32), Cells: 2, Error: "cells: slot 11 has no <owner>"}}},
	}
	var audit bytes.Buffer
	e := &env{src: src, now: &now, audit: &audit}
	cfg := Config{
		AdminToken: testToken, Source: src, SlotMapFile: "/etc/cellgate/slotmap.json",
		SampleEvery: 5 * time.Second, Samples: 4,
		Logger: slog.New(slog.NewTextHandler(&audit, nil)), Now: func() time.Time { return *e.now },
	}
	for _, f := range configure {
		f(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.c = c
	e.srv = httptest.NewServer(c)
	tb.Cleanup(e.srv.Close)
	return e
}

// client returns a browser-like client: cookies kept, redirects not
// followed.
func (e *env) client(tb testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func send(tb testing.TB, c *http.Client, method, url, body, bearer string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{Source: &fakeSource{}}); err == nil || !strings.Contains(err.Error(), "router.admin_token_env") {
		t.Errorf("no token: %v", err)
	}
	if _, err := New(Config{AdminToken: "short", Source: &fakeSource{}}); err == nil || !strings.Contains(err.Error(), "CELLGATE_ROUTER_ADMIN_TOKEN") {
		t.Errorf("short token: %v", err)
	}
	if _, err := New(Config{AdminToken: testToken}); err == nil {
		t.Error("no source accepted")
	}
	if _, err := New(Config{AdminToken: testToken, Source: &fakeSource{}, Samples: -1}); err == nil {
		t.Error("negative samples accepted")
	}
}

// TestGuard: without a token nothing but the login page and the static
// files; the API answers 401 with no data; a wrong token at login is
// audited; the cookie is the router's own.
func TestGuard(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	for _, path := range []string{"/admin/", "/admin/slotmap"} {
		resp, _ := send(t, c, "GET", e.srv.URL+path, "", "")
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/login" {
			t.Errorf("%s without a session: %d → %q", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for _, path := range []string{"/admin/api/cells", "/admin/api/slotmap", "/admin/api/traffic"} {
		for _, bearer := range []string{"", "wrong"} {
			resp, body := send(t, c, "GET", e.srv.URL+path, "", bearer)
			if resp.StatusCode != 401 || strings.Contains(body, "cell-1") || !strings.Contains(body, "console_unauthorized") {
				t.Errorf("%s with %q: %d %s", path, bearer, resp.StatusCode, body)
			}
		}
	}
	if resp, body := send(t, c, "GET", e.srv.URL+"/admin/nothing", "", testToken); resp.StatusCode != 404 || strings.Contains(body, "cell-1") {
		t.Errorf("unknown page: %d %s", resp.StatusCode, body)
	}
	if resp, _ := send(t, c, "GET", e.srv.URL+"/admin", "", ""); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/" {
		t.Errorf("/admin: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := send(t, c, "GET", e.srv.URL+"/admin/static/router.css", "", ""); resp.StatusCode != 200 || !strings.Contains(body, "font") {
		t.Errorf("stylesheet: %d", resp.StatusCode)
	}
	resp, body := send(t, c, "POST", e.srv.URL+"/admin/login", "token=nope", "")
	if resp.StatusCode != 401 || !strings.Contains(body, "not the router") || len(resp.Cookies()) != 0 {
		t.Errorf("wrong token: %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	if !strings.Contains(e.audit.String(), `msg="console audit" role=none actor=none remote=127.0.0.1 action=login outcome="wrong token" console=router`) {
		t.Errorf("no audit line for the wrong token:\n%s", e.audit)
	}
	resp, _ = send(t, c, "POST", e.srv.URL+"/admin/login", "token="+testToken, "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/" {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != SessionCookie || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/admin" {
		t.Fatalf("session cookie %+v", ck)
	}
	if resp, body := send(t, c, "GET", e.srv.URL+"/admin/", "", ""); resp.StatusCode != 200 || !strings.Contains(body, "cell-1") {
		t.Fatalf("overview with the session: %d", resp.StatusCode)
	}
	// Log out needs the CSRF token the page carries.
	if resp, _ := send(t, c, "POST", e.srv.URL+"/admin/logout", "csrf=wrong", ""); resp.StatusCode != 403 {
		t.Errorf("logout without the CSRF token: %d", resp.StatusCode)
	}
	_, page := send(t, c, "GET", e.srv.URL+"/admin/", "", "")
	csrf := between(page, `name="csrf" value="`, `"`)
	if csrf == "" {
		t.Fatal("no CSRF token on the page")
	}
	resp, _ = send(t, c, "POST", e.srv.URL+"/admin/logout", "csrf="+url.QueryEscape(csrf), "")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge != -1 {
		t.Errorf("logout: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := send(t, c, "GET", e.srv.URL+"/admin/", "", ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout: %d", resp.StatusCode)
	}
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	j := strings.Index(s, to)
	if j < 0 {
		return ""
	}
	return s[:j]
}

// TestPages: the overview shows each cell's state, error, refusals,
// ejections and console link, escaped; the slot map page its generation,
// digest, file, frozen slots and reloads.
func TestPages(t *testing.T) {
	e := newEnv(t)
	down := e.now.Add(-90 * time.Second)
	e.src.set("cell-<2>", func(s *router.CellStatus) {
		s.Up, s.DownSince, s.LastError, s.LastErrorAt = false, down, "dial tcp 10.0.0.2:8080: connection <refused>", down
		s.Refusals = router.Refusals{Down: 7, CellCap: 2, TenantCap: 3, Frozen: 1}
		s.Ejections = router.Ejections{Active: 1, Passive: 4}
	})
	c := e.client(t)
	_, body := send(t, c, "GET", e.srv.URL+"/admin/", "", testToken)
	for _, want := range []string{
		"1 up · 1 down", "slot map generation 3", ">abababababab<",
		`<span class="badge down">down</span>`, "since 2026-03-04 05:04:30 UTC (1m30s ago)",
		"connection &lt;refused&gt;", `<td class="n">7</td><td class="n">2</td><td class="n">3</td><td class="n">1</td>`,
		`<td class="n">1 / 4</td>`, `href="http://10.0.0.2:8080/admin/"`, "cell-&lt;2&gt;",
		`id="traffic-chart"`, `id="refusals-chart"`, `http-equiv="refresh" content="5"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(body, "cell-<2>") || strings.Contains(body, "<refused>") {
		t.Error("a name or error reached the page unescaped")
	}
	_, body = send(t, c, "GET", e.srv.URL+"/admin/slotmap", "", testToken)
	for _, want := range []string{
		"generation 3", strings.Repeat("ab", 32), "/etc/cellgate/slotmap.json", "100-199",
		`<span class="badge invalid">invalid</span>`, "no &lt;owner&gt;", "0-8191",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("slot map page lacks %q", want)
		}
	}
	e.src.mu.Lock()
	e.src.sm.Reloads, e.src.sm.Current = nil, false
	e.src.mu.Unlock()
	_, body = send(t, c, "GET", e.srv.URL+"/admin/slotmap", "", testToken)
	if !strings.Contains(body, "No reload since the router started") || !strings.Contains(body, "the last good map stays in use") {
		t.Error("slot map page without reloads and with a bad file")
	}
}

// TestSampler: rates per second between samples, a gap where counters
// restart or a cell comes back under another URL, rings bounded by
// Samples, rings dropped for a cell that left the map; the JSON says null
// for a gap.
func TestSampler(t *testing.T) {
	e := newEnv(t)
	step := func(req1, ref1 uint64) {
		e.src.set("cell-1", func(s *router.CellStatus) { s.Requests, s.Refusals.TenantCap = req1, ref1 })
		*e.now = e.now.Add(5 * time.Second)
		e.c.Sample()
	}
	step(0, 0)   // baseline
	step(50, 5)  // 10/s, 1/s
	step(100, 5) // 10/s, 0/s
	step(10, 5)  // counters restarted: gap
	step(35, 10) // 5/s, 1/s
	tr := e.c.trafficNow(e.src.Cells())
	c1 := tr.Cells[0]
	got := []float64{}
	for _, p := range c1.requests {
		got = append(got, p.V)
	}
	if len(got) != 4 || got[0] != 10 || got[1] != 10 || !math.IsNaN(got[2]) || got[3] != 5 {
		t.Errorf("requests/s %v", got)
	}
	if c1.refusals[0].V != 1 || c1.refusals[1].V != 0 || c1.refusals[3].V != 1 {
		t.Errorf("refusals/s %v", c1.refusals)
	}
	step(45, 10) // a fifth rate: the ring of 4 drops the oldest
	if tr = e.c.trafficNow(e.src.Cells()); len(tr.Cells[0].requests) != 4 || tr.Cells[0].requests[0].V != 10 || tr.Cells[0].requests[3].V != 2 {
		t.Errorf("ring after 5 rates: %v", tr.Cells[0].requests)
	}
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"v":null`) || !strings.Contains(string(raw), `"interval":"5s"`) {
		t.Errorf("traffic JSON %s", raw)
	}
	// cell-1 moves to another URL: a new backend, its counters restart.
	e.src.set("cell-1", func(s *router.CellStatus) { s.URL = "http://10.0.0.9:8080" })
	step(1, 0)
	if tr = e.c.trafficNow(e.src.Cells()); len(tr.Cells[0].requests) != 0 {
		t.Errorf("a cell at a new URL kept the old rings: %v", tr.Cells[0].requests)
	}
	// cell-<2> leaves the map: its rings go.
	e.src.mu.Lock()
	e.src.cells = e.src.cells[:1]
	e.src.mu.Unlock()
	e.c.Sample()
	e.c.mu.Lock()
	n := len(e.c.traffic)
	e.c.mu.Unlock()
	if n != 1 {
		t.Errorf("%d cells sampled after one left the map", n)
	}
}

// TestRunStops: Run samples at once and returns when its context ends.
func TestRunStops(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.c.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.c.mu.Lock()
		n := len(e.c.traffic)
		e.c.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run took no first sample")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestAPI: the JSON of cells, slotmap and traffic with a bearer token.
func TestAPI(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	resp, body := send(t, c, "GET", e.srv.URL+"/admin/api/cells", "", testToken)
	var cs []router.CellStatus
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &cs) != nil || len(cs) != 2 || cs[1].Console != "http://10.0.0.2:8080/admin/" {
		t.Errorf("cells: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
	_, body = send(t, c, "GET", e.srv.URL+"/admin/api/slotmap", "", testToken)
	var sm SlotMap
	if json.Unmarshal([]byte(body), &sm) != nil || sm.Generation != 3 || sm.File != "/etc/cellgate/slotmap.json" || len(sm.Reloads) != 1 || sm.Map.Frozen[0] != "100-199" {
		t.Errorf("slotmap: %s", body)
	}
	e.c.Sample()
	_, body = send(t, c, "GET", e.srv.URL+"/admin/api/traffic", "", testToken)
	var tr Traffic
	if json.Unmarshal([]byte(body), &tr) != nil || len(tr.Cells) != 2 || tr.Samples != 4 || tr.Cells[1].Name != "cell-<2>" {
		t.Errorf("traffic: %s", body)
	}
}

// login logs in with the router's token and returns the session cookie and
// the page's CSRF token.
func (e *env) login(t *testing.T) (*http.Cookie, string) {
	t.Helper()
	c := e.client(t)
	resp, _ := send(t, c, "POST", e.srv.URL+"/admin/login", "token="+testToken, "")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d %v", resp.StatusCode, resp.Cookies())
	}
	_, page := send(t, c, "GET", e.srv.URL+"/admin/", "", "")
	return resp.Cookies()[0], between(page, `name="csrf" value="`, `"`)
}

// withCookie sends a request with only the given cookie (no jar).
func withCookie(t *testing.T, e *env, method, path string, ck *http.Cookie, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(ck)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// A cookie saved before a logout is refused after it by this router; an
// unused session ends after at most 15 minutes.
func TestReplayAfterLogout(t *testing.T) {
	e := newEnv(t)
	ck, csrf := e.login(t)
	if resp := withCookie(t, e, "GET", "/admin/api/cells", ck, ""); resp.StatusCode != 200 {
		t.Fatalf("session before logout: %d", resp.StatusCode)
	}
	if resp := withCookie(t, e, "POST", "/admin/logout", ck, "csrf="+url.QueryEscape(csrf)); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp := withCookie(t, e, "GET", "/admin/api/cells", ck, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replayed cookie after logout: %d, want 401", resp.StatusCode)
	}
	if resp := withCookie(t, e, "GET", "/admin/", ck, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("replayed cookie's page after logout: %d, want the login redirect", resp.StatusCode)
	}

	ck, _ = e.login(t)
	*e.now = e.now.Add(14 * time.Minute)
	if resp := withCookie(t, e, "GET", "/admin/api/cells", ck, ""); resp.StatusCode != 200 {
		t.Fatalf("session used after 14 minutes: %d", resp.StatusCode)
	}
	*e.now = e.now.Add(15 * time.Minute)
	if resp := withCookie(t, e, "GET", "/admin/api/cells", ck, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("session idle for 15 minutes: %d, want 401", resp.StatusCode)
	}
	if _, err := New(Config{AdminToken: testToken, Source: &fakeSource{}, SessionIdle: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// Every answer carries no-store, nosniff and no-referrer; the static
// directory lists nothing; a spoofed X-Forwarded-For from an untrusted
// peer is not what the audit names.
func TestHeadersAndStatic(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/admin/", "", http.StatusSeeOther},
		{"GET", "/admin/login", "", 200},
		{"GET", "/admin/api/cells", "", 401},
		{"GET", "/admin/nothing", "", 404},
		{"GET", "/admin/static/router.css", "", 200},
		{"GET", "/admin/static/", "", 404},
		{"POST", "/admin/login", "token=wrong", 401},
	} {
		req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("X-Forwarded-For", "10.9.8.7")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != tc.want || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s: %d %v", tc.method, tc.path, resp.StatusCode, h)
		}
		if tc.path == "/admin/static/" && strings.Contains(string(raw), "router.css") {
			t.Errorf("/admin/static/ lists its directory: %s", raw)
		}
	}
	if strings.Contains(e.audit.String(), "10.9.8.7") || !strings.Contains(e.audit.String(), "remote=127.0.0.1 action=login") {
		t.Errorf("the audit took the client's X-Forwarded-For:\n%s", e.audit)
	}
}

// The 30th wrong login in a row is refused (429) or delayed a second, in
// real time; a token in the query string is not read.
func TestLoginThrottled(t *testing.T) {
	c, err := New(Config{AdminToken: testToken, Source: &fakeSource{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, _ := send(t, hc, "POST", srv.URL+"/admin/login?token="+url.QueryEscape(testToken), "x=1", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("token in the query string: %d, want 401", resp.StatusCode)
	}
	var resp *http.Response
	var took time.Duration
	for range 30 {
		start := time.Now()
		resp, _ = send(t, hc, "POST", srv.URL+"/admin/login", "token=wrong", "")
		took = time.Since(start)
	}
	if resp.StatusCode != http.StatusTooManyRequests && took < time.Second {
		t.Fatalf("30th wrong login: %d after %s", resp.StatusCode, took)
	}
	if resp, body := send(t, hc, "GET", srv.URL+"/admin/api/cells", "", "wrong"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("bad bearer from a source in backoff: %d %s", resp.StatusCode, body)
	}
}
