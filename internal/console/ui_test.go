package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// browser is an HTTP client with a cookie jar, like a browser without
// JavaScript.
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T) browser {
	jar, _ := cookiejar.New(nil)
	return browser{t, &http.Client{Jar: jar}}
}

func (b browser) get(u string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b browser) post(u string, form url.Values) (int, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(u, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestPages: the login trades a token for a session; pages list both
// shards' jobs; a read-only user sees no action buttons and cannot act; an
// operator acts only with the form's CSRF token.
func TestPages(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	ids := env.Seed("shard-1", consoletest.Job{Kind: "bill_order", Tenant: "umbrella", State: pgjobs.StateFailed, Attempt: 5, Errors: []string{"boom"}})
	jobURL := env.URL + "/admin/jobs/shard-1/" + itoa(ids[0])

	anon := newBrowser(t)
	if st, body := anon.get(env.URL + "/admin/jobs"); st != http.StatusOK || !strings.Contains(body, `name="token"`) || strings.Contains(body, "umbrella") {
		t.Fatalf("anonymous /admin/jobs = %d, want the login page without data", st)
	}
	if st, _ := anon.post(env.URL+"/admin/login", url.Values{"token": {"nope"}}); st != http.StatusUnauthorized {
		t.Errorf("login with a wrong token = %d, want 401", st)
	}

	reader := newBrowser(t)
	if st, body := reader.post(env.URL+"/admin/login", url.Values{"token": {consoletest.AdminToken}}); st != http.StatusOK || !strings.Contains(body, `id="chart"`) {
		t.Fatalf("login as reader = %d, want the overview with its chart:\n%s", st, body)
	}
	if _, body := reader.get(env.URL + "/admin/"); !regexp.MustCompile(`id="count-age">Counts are [0-9.]+m?s old`).MatchString(body) {
		t.Errorf("overview does not say how old its counts are:\n%s", body)
	}
	st, body := reader.get(env.URL + "/admin/jobs")
	if st != http.StatusOK || !strings.Contains(body, ">shard-0<") || !strings.Contains(body, ">shard-1<") || !strings.Contains(body, ">control<") {
		t.Fatalf("jobs page = %d, want jobs of control, shard-0 and shard-1:\n%s", st, body)
	}
	_, body = reader.get(jobURL)
	if !strings.Contains(body, "umbrella") || strings.Contains(body, "action-retry") || !strings.Contains(body, "read-only") {
		t.Errorf("read-only job page shows action buttons or lacks the job:\n%s", body)
	}
	csrf := csrfRe.FindStringSubmatch(body)[1]
	if st, _ := reader.post(jobURL+"/retry", url.Values{"csrf": {csrf}}); st != http.StatusForbidden {
		t.Errorf("read-only retry = %d, want 403", st)
	}

	op := newBrowser(t)
	op.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	_, body = op.get(jobURL)
	if !strings.Contains(body, `id="action-retry"`) || !strings.Contains(body, `id="action-delete"`) || strings.Contains(body, `id="action-cancel"`) {
		t.Errorf("operator's page of a failed job should offer retry and delete only:\n%s", body)
	}
	if st, _ := op.post(jobURL+"/retry", nil); st != http.StatusForbidden {
		t.Errorf("retry without the CSRF token = %d, want 403", st)
	}
	if st, _ := op.post(jobURL+"/retry", url.Values{"csrf": {csrf}}); st != http.StatusForbidden {
		t.Errorf("retry with another session's CSRF token = %d, want 403", st)
	}
	opCSRF := csrfRe.FindStringSubmatch(body)[1]
	st, body = op.post(jobURL+"/retry", url.Values{"csrf": {opCSRF}})
	if st != http.StatusOK || !strings.Contains(body, "The job will run again.") || !strings.Contains(body, `id="state">available<`) {
		t.Errorf("retry = %d, want the job page, available:\n%s", st, body)
	}
	// Bulk actions: offered to operators once a filter is set, never to a
	// read-only user; the form leads to the progress page.
	if _, body := reader.get(env.URL + "/admin/jobs?tenant=umbrella"); strings.Contains(body, "bulk-retry") {
		t.Error("read-only user is offered bulk actions")
	}
	_, body = op.get(env.URL + "/admin/jobs?tenant=acme")
	if !strings.Contains(body, `id="bulk-retry"`) {
		t.Fatalf("operator's filtered job list offers no bulk actions:\n%s", body)
	}
	if _, body := op.get(env.URL + "/admin/jobs"); strings.Contains(body, "bulk-retry") {
		t.Error("bulk actions offered without a filter")
	}
	// The first post says how many jobs it will touch and asks to
	// confirm; the confirmation runs it.
	st, body = op.post(env.URL+"/admin/bulk", url.Values{"csrf": {opCSRF}, "action": {"cancel"}, "tenant": {"acme"}})
	m := regexp.MustCompile(`name="confirm" value="([^"]+)"`).FindStringSubmatch(body)
	if st != http.StatusOK || m == nil || !strings.Contains(body, `id="bulk-count"`) {
		t.Fatalf("bulk cancel's confirmation page = %d:\n%s", st, body)
	}
	st, body = op.post(env.URL+"/admin/bulk", url.Values{"csrf": {opCSRF}, "action": {"cancel"}, "tenant": {"acme"}, "confirm": {m[1]}})
	if st != http.StatusOK || !strings.Contains(body, "Bulk cancel") || !strings.Contains(body, `tenant=&#34;acme&#34;`) {
		t.Errorf("bulk cancel = %d:\n%s", st, body)
	}
	// Logged out, the session cookie is gone.
	op.post(env.URL+"/admin/logout", url.Values{"csrf": {opCSRF}})
	if _, body := op.get(jobURL); !strings.Contains(body, `name="token"`) {
		t.Error("after logout the job page is still served")
	}
	// The logout is audited, as the router's console audits its own.
	if audit := env.Audit.String(); !regexp.MustCompile(`msg="console audit" role=operator actor=session:[0-9a-f]{12} remote=127.0.0.1 action=logout outcome=ok`).MatchString(audit) {
		t.Errorf("audit lacks the logout:\n%s", audit)
	}
}
