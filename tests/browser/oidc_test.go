package browser

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoleauth/oidctest"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// TestOIDCLoginInBrowser logs a person in to the cell's console through
// the OpenID provider's redirects in a real browser (login link →
// provider → callback → overview), retries a job as that person, logs
// out, and finds the console closed to the browser's cookie afterwards.
// A person of the readers' group lands read-only, without action buttons.
// Every audit line of the operator's session names the person.
func TestOIDCLoginInBrowser(t *testing.T) {
	p := oidctest.New(t)
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) { c.OIDC = p.Config() }})
	failed := env.Seed("shard-0", consoletest.Job{Kind: "send_welcome", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5,
		Errors: []string{"smtp 451"}})[0]

	op := newBrowser(t)
	run(t, op, "open the login page", chromedp.Navigate(env.URL+"/admin/login"),
		chromedp.WaitVisible(`#oidc-login`, chromedp.ByQuery))
	oidcLogin(t, op, env.URL)
	var role string
	run(t, op, "the operator's overview", chromedp.Text(`#role`, &role, chromedp.ByQuery))
	if role != "operator" {
		t.Fatalf("after the OpenID login the role is %q, want operator", role)
	}

	var state string
	run(t, op, "open the failed job", chromedp.Navigate(env.URL+"/admin/jobs/shard-0/"+strconv.FormatInt(failed, 10)),
		chromedp.WaitVisible(`#action-retry`, chromedp.ByQuery))
	follow(t, op, "retry it", `#action-retry`,
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Text(`#state`, &state, chromedp.ByQuery),
	)
	if state != "available" {
		t.Errorf("after the person's retry the job is %q, want available", state)
	}
	if j, err := env.Databases[1].Job(context.Background(), jobs.JobID(failed)); err != nil || j.State != pgjobs.StateAvailable {
		t.Errorf("in shard-0 the job is %+v, %v; want available", j, err)
	}

	follow(t, op, "log out", `form[action="/admin/logout"] button`, chromedp.WaitVisible(`#oidc-login`, chromedp.ByQuery))
	// The browser still holds whatever cookie it had; the console must
	// send it to the login page again.
	var loc string
	run(t, op, "the console after logout", chromedp.Navigate(env.URL+"/admin/jobs"),
		chromedp.WaitVisible(`#oidc-login`, chromedp.ByQuery), chromedp.Location(&loc))
	if !strings.Contains(loc, "/admin/login") {
		t.Errorf("after logout /admin/jobs shows %s, want the login page", loc)
	}

	for _, action := range []string{"action=login", "action=retry", "action=logout"} {
		line := auditLine(env.Audit.String(), action)
		if !strings.Contains(line, "actor=oidc:alice") || !strings.Contains(line, "email=alice@example.com") {
			t.Errorf("the audit line of %s does not name the person: %q\n%s", action, line, env.Audit.String())
		}
	}

	// A reader: the provider now logs in a person of the readers' group.
	p.SetPerson(map[string]any{"sub": "bob", "email": "bob@example.com", "groups": []string{oidctest.ReaderGroup}})
	ro := newBrowser(t)
	run(t, ro, "open the login page", chromedp.Navigate(env.URL+"/admin/login"),
		chromedp.WaitVisible(`#oidc-login`, chromedp.ByQuery))
	oidcLogin(t, ro, env.URL)
	var buttons int
	run(t, ro, "the reader's job page", chromedp.Navigate(env.URL+"/admin/jobs/shard-0/"+strconv.FormatInt(failed, 10)),
		chromedp.WaitVisible(`#state`, chromedp.ByQuery),
		chromedp.Text(`#role`, &role, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('.actions button, #action-retry, #action-cancel, #action-delete').length`, &buttons))
	if role != "read-only" || buttons != 0 {
		t.Errorf("the reader sees role %q and %d action buttons, want read-only and none", role, buttons)
	}
}

// oidcLogin clicks the login page's OpenID link and waits until the
// browser, after the provider's redirect and the callback's refresh,
// shows the overview.
func oidcLogin(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(`#oidc-login`, chromedp.ByQuery)); err != nil {
		t.Fatalf("follow the OpenID login link: %v", err)
	}
	// The callback answers a page that refreshes to /admin/: wait for
	// that navigation before querying, or the query races it.
	deadline := time.Now().Add(20 * time.Second)
	var loc string
	for {
		if err := chromedp.Run(ctx, chromedp.Location(&loc)); err == nil && loc == base+"/admin/" {
			if err := chromedp.Run(ctx, chromedp.WaitVisible(`#role`, chromedp.ByQuery)); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the OpenID login did not reach %s/admin/ (the browser is at %s)", base, loc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditLine is the first line of the audit log holding action.
func auditLine(audit, action string) string {
	for _, line := range strings.Split(audit, "\n") {
		if strings.Contains(line, action+" ") {
			return line
		}
	}
	return ""
}
