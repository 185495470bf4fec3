package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
)

// TestTimeRange: from and to bound created_at in the job list, the page's
// form and bulk actions; a bad value is a 400 naming the parameter and the
// forms it takes.
func TestTimeRange(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	old := env.Seed("shard-0", consoletest.Job{Kind: "k", Tenant: "acme", Age: 3 * time.Hour})
	recent := env.Seed("shard-0", consoletest.Job{Kind: "k", Tenant: "acme", Age: 30 * time.Minute})
	middle := env.Seed("shard-1", consoletest.Job{Kind: "k", Tenant: "globex", Age: 2 * time.Hour})
	cut := time.Now().Add(-150 * time.Minute).UTC()
	cut2 := time.Now().Add(-90 * time.Minute).UTC()
	ids := func(q url.Values) []int64 {
		t.Helper()
		var page console.JobPage
		if st, body := call(t, "GET", env.URL+"/admin/api/jobs?"+q.Encode(), consoletest.AdminToken, &page); st != http.StatusOK {
			t.Fatalf("jobs?%s = %d %s", q.Encode(), st, body)
		}
		var out []int64
		for _, j := range page.Jobs {
			out = append(out, int64(j.ID))
		}
		return out
	}
	if got := ids(url.Values{"from": {cut.Format(time.RFC3339)}}); len(got) != 2 || got[0] != recent[0] || got[1] != middle[0] {
		t.Errorf("from %v = %v, want %d (shard-0) and %d (shard-1)", cut, got, recent[0], middle[0])
	}
	if got := ids(url.Values{"to": {cut.Format(time.RFC3339)}}); len(got) != 1 || got[0] != old[0] {
		t.Errorf("to %v = %v, want only %d", cut, got, old[0])
	}
	// The page's datetime-local form (UTC, minutes or seconds).
	if got := ids(url.Values{"from": {cut.Format("2006-01-02T15:04")}, "to": {cut2.Format("2006-01-02T15:04:05")}}); len(got) != 1 || got[0] != middle[0] {
		t.Errorf("from %v to %v = %v, want only %d", cut, cut2, got, middle[0])
	}
	for q, want := range map[string]string{
		"from=yesterday":                `from: \"yesterday\" is not a time; write RFC 3339`,
		"to=2026-13-01":                 `to: \"2026-13-01\" is not a time`,
		"from=2026-12-05&to=2026-12-04": `to: \"2026-12-04\" is not after from`,
	} {
		st, body := call(t, "GET", env.URL+"/admin/api/jobs?"+q, consoletest.AdminToken, nil)
		if st != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("jobs?%s = %d %s, want 400 with %s", q, st, body, want)
		}
	}

	// The page keeps the range in its form and in its bulk form.
	b := newBrowser(t)
	b.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	from := cut.Format("2006-01-02T15:04")
	if _, body := b.get(env.URL + "/admin/jobs?from=" + from); strings.Contains(body, `id="bulk-delete"`) {
		t.Errorf("a range alone is offered bulk actions:\n%s", body)
	}
	st, body := b.get(env.URL + "/admin/jobs?kind=k&from=" + from)
	if st != http.StatusOK || !strings.Contains(body, `name="from" id="from" value="`+from+`"`) ||
		!strings.Contains(body, `<input type="hidden" name="from" value="`+from+`">`) || !strings.Contains(body, `id="bulk-delete"`) {
		t.Errorf("jobs page with from = %d, want the range in both forms:\n%s", st, body)
	}
	if st, body := b.get(env.URL + "/admin/jobs?to=later"); st != http.StatusBadRequest || !strings.Contains(body, "to: &#34;later&#34; is not a time") {
		t.Errorf("jobs page with a bad to = %d, want 400 naming to:\n%s", st, body)
	}

	// A bulk action with a range touches only the jobs in it.
	q := "action=delete&kind=k&to=" + url.QueryEscape(cut2.Format(time.RFC3339))
	var pre console.BulkPreview
	if st, body := call(t, "POST", env.URL+"/admin/api/bulk?"+q, consoletest.OperatorToken, &pre); st != http.StatusOK || pre.Count != 2 {
		t.Fatalf("bulk preview %s = %d %s, want the count 2", q, st, body)
	}
	req, _ := http.NewRequest("POST", env.URL+"/admin/api/bulk?"+q, strings.NewReader(url.Values{"confirm": {pre.Confirm}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+consoletest.OperatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("bulk delete to = %d", resp.StatusCode)
	}
	loc := resp.Header.Get("Location")
	deadline := time.Now().Add(10 * time.Second)
	var bs console.BulkStatus
	for bs.Finished == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		call(t, "GET", env.URL+loc, consoletest.AdminToken, &bs)
	}
	if bs.Changed != 2 || bs.Filter.To.IsZero() || !bs.Filter.From.IsZero() {
		t.Errorf("bulk delete before %v = %+v, want 2 changed and the range in its filter", cut2, bs)
	}
	if got := ids(url.Values{}); len(got) != 1 || got[0] != recent[0] {
		t.Errorf("jobs left = %v, want only %d", got, recent[0])
	}
	if st, body := call(t, "POST", env.URL+"/admin/api/bulk?action=delete&kind=k&from=soon", consoletest.OperatorToken, nil); st != http.StatusBadRequest || !strings.Contains(body, "from:") {
		t.Errorf("bulk with a bad from = %d %s, want 400 naming from", st, body)
	}
}
