package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// send sends one request with the given cookie (may be nil) and form body
// (nil: none), never following redirects.
func send(t *testing.T, method, u string, ck *http.Cookie, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if ck != nil {
		req.AddCookie(ck)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// loginCookie logs in at base and returns the session cookie and its CSRF
// token (read from the overview's logout form).
func loginCookie(t *testing.T, base, token string) (*http.Cookie, string) {
	t.Helper()
	resp, _ := send(t, "POST", base+"/admin/login", nil, url.Values{"token": {token}}, nil)
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.SessionCookie {
			ck = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || ck == nil {
		t.Fatalf("login = %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	_, body := send(t, "GET", base+"/admin/", ck, nil, nil)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the overview:\n%s", body)
	}
	return ck, m[1]
}

// A cookie saved before a logout is refused after it, by the process that
// logged out and by another process of the cell (they share the control
// database): reads get 401, actions are not done.
func TestCookieReplayedAfterLogout(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	ids := env.Seed("shard-0", consoletest.Job{Kind: "k", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5})
	other := env.Another()
	ck, csrf := loginCookie(t, env.URL, consoletest.OperatorToken)
	for _, base := range []string{env.URL, other} {
		if resp, body := send(t, "GET", base+"/admin/api/jobs", ck, nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s before logout = %d %s", base, resp.StatusCode, body)
		}
	}
	if resp, _ := send(t, "POST", env.URL+"/admin/logout", ck, url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d", resp.StatusCode)
	}
	job := "/admin/jobs/shard-0/" + itoa(ids[0])
	for _, base := range []string{env.URL, other} {
		if resp, body := send(t, "GET", base+"/admin/api/jobs", ck, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: replayed cookie after logout = %d %s, want 401", base, resp.StatusCode, body)
		}
		if resp, _ := send(t, "POST", base+job+"/retry", ck, url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: replayed cookie's retry = %d, want 401", base, resp.StatusCode)
		}
	}
	var j pgjobs.JobInfo
	call(t, "GET", env.URL+"/admin/api"+job[len("/admin"):], consoletest.AdminToken, &j)
	if j.State != pgjobs.StateFailed {
		t.Errorf("the replayed retry changed the job: %s", j.State)
	}
	// A login at one process is a session at the other.
	ck2, _ := loginCookie(t, env.URL, consoletest.AdminToken)
	if resp, _ := send(t, "GET", other+"/admin/api/queues", ck2, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a session from another process = %d", resp.StatusCode)
	}
}

// Every console answer carries no-store, nosniff and no-referrer; the
// static directory lists nothing.
func TestAnswerHeaders(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	ck, _ := loginCookie(t, env.URL, consoletest.AdminToken)
	for _, tc := range []struct {
		path string
		ck   *http.Cookie
		st   int
	}{
		{"/admin/api/jobs", ck, http.StatusOK},
		{"/admin/api/jobs", nil, http.StatusUnauthorized},
		{"/admin/api/jobs/shard-0/999999", ck, http.StatusNotFound},
		{"/admin/", ck, http.StatusOK},
		{"/admin/jobs", nil, http.StatusSeeOther},
		{"/admin", nil, http.StatusSeeOther},
		{"/admin/login", nil, http.StatusOK},
		{"/admin/static/console.css", nil, http.StatusOK},
		{"/admin/static/", nil, http.StatusNotFound},
		{"/admin/nothing", nil, http.StatusNotFound},
		{"/admin/api/nothing", ck, http.StatusNotFound},
	} {
		resp, body := send(t, "GET", env.URL+tc.path, tc.ck, nil, nil)
		h := resp.Header
		if resp.StatusCode != tc.st || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s = %d %v, want %d with no-store, nosniff, no-referrer", tc.path, resp.StatusCode, h, tc.st)
		}
		if tc.path == "/admin/static/" && strings.Contains(body, "console.css") {
			t.Errorf("/admin/static/ lists its directory:\n%s", body)
		}
	}
}

// A flash message comes from a fixed set keyed by a code: no text from the
// URL reaches an authenticated page.
func TestFlashFromFixedSet(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	ids := env.Seed("shard-0", consoletest.Job{Kind: "k", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5})
	ck, _ := loginCookie(t, env.URL, consoletest.AdminToken)
	const bait = "Your session expired, call 555-0100"
	for _, p := range []string{
		"/admin/?paused=" + url.QueryEscape(bait) + "&database=" + url.QueryEscape(bait),
		"/admin/?flash=" + url.QueryEscape(bait),
		"/admin/jobs/shard-0/" + itoa(ids[0]) + "?done=" + url.QueryEscape(bait),
	} {
		_, body := send(t, "GET", env.URL+p, ck, nil, nil)
		if strings.Contains(body, "555-0100") || strings.Contains(body, `class="flash"`) {
			t.Errorf("GET %s shows text from the URL:\n%s", p, body)
		}
	}
	if _, body := send(t, "GET", env.URL+"/admin/?flash=paused", ck, nil, nil); !strings.Contains(body, `<p class="flash" role="status">The queue is paused.</p>`) {
		t.Errorf("?flash=paused shows no fixed message:\n%s", body)
	}
}

// Wrong logins are throttled in real time, audited with the connection's
// address (a spoofed X-Forwarded-For from this untrusted peer is ignored)
// and a token in the query string is never read.
func TestLoginThrottledAndAudited(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	if resp, _ := send(t, "POST", env.URL+"/admin/login?token="+url.QueryEscape(consoletest.AdminToken), nil, url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a token in the query string = %d, want 401", resp.StatusCode)
	}
	var resp *http.Response
	var took time.Duration
	for range 30 {
		start := time.Now()
		resp, _ = send(t, "POST", env.URL+"/admin/login", nil, url.Values{"token": {"wrong"}}, map[string]string{"X-Forwarded-For": "10.9.8.7", "X-Real-IP": "10.9.8.7"})
		took = time.Since(start)
	}
	if resp.StatusCode != http.StatusTooManyRequests && took < time.Second {
		t.Fatalf("30th wrong login = %d after %s, want 429 or >= 1s", resp.StatusCode, took)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Bad bearer tokens meet the same backoff (this source is in it now).
	if st, body := call(t, "GET", env.URL+"/admin/api/jobs", "wrong", nil); st != http.StatusTooManyRequests || !strings.Contains(body, "console_throttled") {
		t.Errorf("bearer from a source in backoff = %d %s, want 429", st, body)
	}
	audit := env.Audit.String()
	if strings.Contains(audit, "10.9.8.7") {
		t.Errorf("the audit took the client's X-Forwarded-For:\n%s", audit)
	}
	if n := strings.Count(audit, "remote=127.0.0.1 action=login outcome="); n != 31 {
		t.Errorf("%d audited login refusals with the connection's address, want 31:\n%s", n, audit)
	}
}

// A bulk action needs a confirmation made for its action, filter and
// credential: another filter's is refused and nothing changes.
func TestBulkConfirmation(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	failed := consoletest.Job{Kind: "k", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5}
	env.Seed("shard-0", failed, failed)
	env.Seed("shard-1", failed, consoletest.Job{Kind: "k", Tenant: "globex", State: pgjobs.StateFailed, Attempt: 5})
	var pre console.BulkPreview
	if st, body := call(t, "POST", env.URL+"/admin/api/bulk?action=delete&tenant=acme", consoletest.OperatorToken, &pre); st != http.StatusOK || pre.Count != 3 {
		t.Fatalf("preview = %d %s, want the count 3", st, body)
	}
	var page console.JobPage
	call(t, "GET", env.URL+"/admin/api/jobs", consoletest.AdminToken, &page)
	if len(page.Jobs) != 4 {
		t.Fatalf("the preview changed jobs: %d left", len(page.Jobs))
	}
	for _, q := range []string{"action=delete&tenant=globex", "action=retry&tenant=acme", "action=delete&tenant=acme&state=failed"} {
		resp, body := send(t, "POST", env.URL+"/admin/api/bulk?"+q, nil, url.Values{"confirm": {pre.Confirm}}, map[string]string{"Authorization": "Bearer " + consoletest.OperatorToken})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "console_bad_confirmation") {
			t.Errorf("%s with acme's delete confirmation = %d %s, want 400", q, resp.StatusCode, body)
		}
	}
	// A confirmation in the query string is not read: this is a preview.
	var again console.BulkPreview
	if st, _ := call(t, "POST", env.URL+"/admin/api/bulk?action=delete&tenant=acme&confirm="+url.QueryEscape(pre.Confirm), consoletest.OperatorToken, &again); st != http.StatusOK || again.Count != 3 {
		t.Errorf("confirmation in the query = %d, want a preview", st)
	}
	resp, body := send(t, "POST", env.URL+"/admin/api/bulk?action=delete&tenant=acme", nil, url.Values{"confirm": {pre.Confirm}}, map[string]string{"Authorization": "Bearer " + consoletest.OperatorToken})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("confirmed bulk = %d %s", resp.StatusCode, body)
	}
}
