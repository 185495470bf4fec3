package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/console/consoletest"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// call sends one request with a bearer token ("" = none) and decodes the
// JSON answer into out (nil = ignore).
func call(t *testing.T, method, u, token string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, u, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

func seedBoth(env *consoletest.Env) {
	env.Seed("shard-0",
		consoletest.Job{Kind: "send_welcome", Tenant: "acme", Age: 3 * time.Minute},
		consoletest.Job{Kind: "send_welcome", Tenant: "globex", State: pgjobs.StateCompleted, Attempt: 1, Age: 2 * time.Minute})
	env.Seed("shard-1",
		consoletest.Job{Kind: "bill_order", Queue: "billing", Tenant: "initech", State: pgjobs.StateFailed, Attempt: 5,
			Errors: []string{"card declined", "card declined", "gateway timeout", "card declined", "card declined"}, Age: time.Minute})
	env.Seed("control", consoletest.Job{Kind: "nightly_report", Age: 4 * time.Minute})
}

// TestJobsAcrossShards: one listing names every job's database, filters
// hold, and keyset pages cover each job once.
func TestJobsAcrossShards(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	var page console.JobPage
	if st, body := call(t, "GET", env.URL+"/admin/api/jobs", consoletest.AdminToken, &page); st != http.StatusOK {
		t.Fatalf("GET jobs = %d %s", st, body)
	}
	if page.Partial || len(page.Jobs) != 4 {
		t.Fatalf("page = %+v, want 4 jobs from 3 databases, not partial", page)
	}
	var order []string
	for _, j := range page.Jobs {
		order = append(order, j.Database+"/"+j.Tenant)
	}
	if got := strings.Join(order, " "); got != "shard-1/initech shard-0/globex shard-0/acme control/" {
		t.Errorf("jobs newest first = %s", got)
	}

	var filtered console.JobPage
	call(t, "GET", env.URL+"/admin/api/jobs?tenant=initech&state=failed", consoletest.AdminToken, &filtered)
	if len(filtered.Jobs) != 1 || filtered.Jobs[0].Database != "shard-1" || len(filtered.Jobs[0].Errors) != 5 {
		t.Errorf("tenant+state filter = %+v", filtered.Jobs)
	}
	if st, _ := call(t, "GET", env.URL+"/admin/api/jobs?state=bogus", consoletest.AdminToken, nil); st != http.StatusBadRequest {
		t.Errorf("bad state = %d, want 400", st)
	}

	// Pages of 1: every job exactly once, then no cursor.
	seen := map[string]bool{}
	cursor := ""
	for range 10 {
		var p console.JobPage
		call(t, "GET", env.URL+"/admin/api/jobs?limit=1&cursor="+url.QueryEscape(cursor), consoletest.AdminToken, &p)
		for _, j := range p.Jobs {
			k := j.Database + "/" + j.Tenant
			if seen[k] {
				t.Errorf("job %s shown twice", k)
			}
			seen[k] = true
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 4 {
		t.Errorf("pages covered %d jobs, want 4: %v", len(seen), seen)
	}
}

// TestUnavailableShard: a database that is down makes the answer partial,
// naming it; the others still answer, with 200.
func TestUnavailableShard(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	env.MakeUnavailable("shard-1")
	var page console.JobPage
	if st, body := call(t, "GET", env.URL+"/admin/api/jobs", consoletest.AdminToken, &page); st != http.StatusOK {
		t.Fatalf("GET jobs with shard-1 down = %d %s", st, body)
	}
	if !page.Partial || len(page.Jobs) != 3 {
		t.Fatalf("page = %+v, want partial with the 3 jobs of control and shard-0", page)
	}
	for _, d := range page.Databases {
		if (d.Database == "shard-1") != (d.Error != "") {
			t.Errorf("database status %+v: only shard-1 should carry an error", d)
		}
		if d.Database == "shard-1" && !strings.Contains(d.Error, "not currently accepting connections") {
			t.Errorf("shard-1's error = %q, want PostgreSQL's reason", d.Error)
		}
	}
	var q console.QueuesReport
	call(t, "GET", env.URL+"/admin/api/queues", consoletest.AdminToken, &q)
	if !q.Partial || q.Databases[2].Database != "shard-1" || q.Databases[2].Error == "" || len(q.Databases[1].Queues) != 1 {
		t.Errorf("queues with shard-1 down = %+v", q)
	}
	if q.Databases[1].CountedAt.IsZero() || !q.Databases[2].CountedAt.IsZero() || q.CountAge < 0 || q.CountAge >= console.CountsMaxAge {
		t.Errorf("count times: shard-0 %v, shard-1 (down) %v, age %v; want shard-0's alone, under %v",
			q.Databases[1].CountedAt, q.Databases[2].CountedAt, q.CountAge, console.CountsMaxAge)
	}
	if st, body := call(t, "GET", env.URL+"/admin/api/jobs/shard-1/1", consoletest.AdminToken, nil); st != http.StatusServiceUnavailable || !strings.Contains(body, "shard-1") {
		t.Errorf("job detail on the down shard = %d %s, want 503 naming shard-1", st, body)
	}
}

// TestSlowDatabase: a database that never answers costs the listing its
// timeout, not more, and is named.
func TestSlowDatabase(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{Slow: true, DatabaseTimeout: 300 * time.Millisecond})
	seedBoth(env)
	start := time.Now()
	var page console.JobPage
	if st, body := call(t, "GET", env.URL+"/admin/api/jobs", consoletest.AdminToken, &page); st != http.StatusOK {
		t.Fatalf("GET jobs = %d %s", st, body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("listing took %s with a 300ms database timeout", took)
	}
	last := page.Databases[len(page.Databases)-1]
	if !page.Partial || len(page.Jobs) != 4 || last.Database != "slow" || !strings.Contains(last.Error, "300ms") {
		t.Errorf("page = %+v, want the 4 jobs and slow named with its timeout", page)
	}
}

// TestAuth: no token, a wrong token and a malformed header get 401 with no
// data; the read-only token cannot act; the operator token can.
func TestAuth(t *testing.T) {
	t.Parallel()
	// Many wrong tokens from one address: the throttle (its own tests) is
	// set past them here.
	env := consoletest.New(t, consoletest.Options{Configure: func(c *console.Config) {
		c.Limiter = consoleauth.NewLimiter(consoleauth.LimiterConfig{Free: 1000})
	}})
	ids := env.Seed("shard-1", consoletest.Job{Kind: "bill_order", Tenant: "initech", State: pgjobs.StateFailed, Attempt: 5, Errors: []string{"boom"}})
	job := env.URL + "/admin/api/jobs/shard-1/" + itoa(ids[0])
	for _, tok := range []string{"", "wrong", consoletest.AdminToken + "x"} {
		for _, u := range []string{env.URL + "/admin/api/jobs", job, env.URL + "/admin/api/queues", env.URL + "/admin/api/slots"} {
			st, body := call(t, "GET", u, tok, nil)
			if st != http.StatusUnauthorized || strings.Contains(body, "initech") || strings.Contains(body, "shard-1") {
				t.Errorf("GET %s with token %q = %d %s, want a bare 401", u, tok, st, body)
			}
		}
	}
	req, _ := http.NewRequest("GET", env.URL+"/admin/api/jobs", nil)
	req.Header.Set("Authorization", "Basic "+consoletest.AdminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic scheme = %v %v, want 401", resp.StatusCode, err)
	}

	if st, _ := call(t, "POST", job+"/retry", consoletest.AdminToken, nil); st != http.StatusForbidden {
		t.Errorf("read-only retry = %d, want 403", st)
	}
	var j pgjobs.JobInfo
	call(t, "GET", job, consoletest.AdminToken, &j)
	if j.State != pgjobs.StateFailed {
		t.Fatalf("after a refused retry the job is %s", j.State)
	}

	var res console.ActionResult
	if st, body := call(t, "POST", job+"/retry", consoletest.OperatorToken, &res); st != http.StatusOK || res.Action != pgjobs.ActRetry {
		t.Fatalf("operator retry = %d %s", st, body)
	}
	call(t, "GET", job, consoletest.AdminToken, &j)
	if j.State != pgjobs.StateAvailable || j.MaxAttempts != 6 || len(j.Errors) != 1 {
		t.Errorf("retried job = %+v, want available with one more attempt and its error kept", j)
	}
	if st, _ := call(t, "POST", job+"/explode", consoletest.OperatorToken, nil); st != http.StatusNotFound {
		t.Errorf("unknown action = %d, want 404", st)
	}
	if st, _ := call(t, "POST", env.URL+"/admin/api/jobs/shard-9/1/retry", consoletest.OperatorToken, nil); st != http.StatusNotFound {
		t.Errorf("unknown database = %d, want 404", st)
	}
	if st, _ := call(t, "POST", job+"/cancel", consoletest.OperatorToken, nil); st != http.StatusOK {
		t.Errorf("cancel of the retried job = %d", st)
	}
	if st, _ := call(t, "POST", job+"/cancel", consoletest.OperatorToken, nil); st != http.StatusConflict {
		t.Errorf("second cancel = %d, want 409", st)
	}
	if st, _ := call(t, "POST", job+"/delete", consoletest.OperatorToken, nil); st != http.StatusOK {
		t.Errorf("delete = %d", st)
	}
	if st, _ := call(t, "GET", job, consoletest.AdminToken, nil); st != http.StatusNotFound {
		t.Errorf("deleted job = %d, want 404", st)
	}
	audit := env.Audit.String()
	for _, want := range []string{"role=operator actor=operator-token remote=127.0.0.1 action=retry outcome=ok console=cell database=shard-1",
		`action=retry outcome=ok console=cell database=shard-1 filter="id=`, "count=1 before=failed after=available",
		"action=cancel outcome=ok", "count=1 before=available after=failed",
		"outcome=\"pgjobs: the job's state does not allow this action\"", "count=0 before=failed after=failed",
		"action=delete outcome=ok", "count=1 before=failed after=absent"} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit log lacks %q:\n%s", want, audit)
		}
	}
}

// TestReports: slots, lanes and admission answer.
func TestReports(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	var s console.SlotReport
	call(t, "GET", env.URL+"/admin/api/slots", consoletest.AdminToken, &s)
	if len(s.Shards) != 2 || s.Shards[0].Count+s.Shards[1].Count != 16384 || s.Shards[1].Cell != "cell-1" || !s.Shards[1].Here {
		t.Errorf("slots = %+v", s)
	}
	var l console.LanesReport
	call(t, "GET", env.URL+"/admin/api/lanes", consoletest.AdminToken, &l)
	if l.Workers != 12 || l.Databases != 3 || l.Claim != "fair" {
		t.Errorf("lanes = %+v, want 4 workers on each of 3 databases", l)
	}
	var a map[string]any
	if st, _ := call(t, "GET", env.URL+"/admin/api/admission", consoletest.AdminToken, &a); st != http.StatusOK || a["server"] == nil {
		t.Errorf("admission = %d %v", st, a)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestBulk: an action on every job matching a filter runs in the
// background over every database, reports progress, names a database that
// is down and changes nothing outside the filter.
func TestBulk(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	failed := consoletest.Job{Kind: "bill_order", Tenant: "acme", State: pgjobs.StateFailed, Attempt: 5, Errors: []string{"boom"}}
	env.Seed("shard-0", failed, failed, failed)
	env.Seed("shard-1", failed, failed, consoletest.Job{Kind: "bill_order", Tenant: "globex", State: pgjobs.StateFailed, Attempt: 5})
	if st, _ := call(t, "POST", env.URL+"/admin/api/bulk?action=retry&tenant=acme", consoletest.AdminToken, nil); st != http.StatusForbidden {
		t.Errorf("read-only bulk = %d, want 403", st)
	}
	for _, q := range []string{"action=retry", "action=delete&from=1970-01-01", "action=delete&database=shard-0", "action=delete&from=1970-01-01&to=2100-01-01&database=shard-1"} {
		if st, body := call(t, "POST", env.URL+"/admin/api/bulk?"+q, consoletest.OperatorToken, nil); st != http.StatusBadRequest || !strings.Contains(body, "state, kind, queue or tenant") {
			t.Errorf("bulk %s (no real filter) = %d %s, want 400", q, st, body)
		}
	}
	run := func(query string) console.BulkStatus {
		t.Helper()
		// First call: the count and a confirmation; nothing changes.
		var pre console.BulkPreview
		if st, body := call(t, "POST", env.URL+"/admin/api/bulk?"+query, consoletest.OperatorToken, &pre); st != http.StatusOK || pre.Confirm == "" {
			t.Fatalf("bulk %s preview = %d %s", query, st, body)
		}
		req, _ := http.NewRequest("POST", env.URL+"/admin/api/bulk?"+query, strings.NewReader(url.Values{"confirm": {pre.Confirm}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+consoletest.OperatorToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("bulk %s = %d", query, resp.StatusCode)
		}
		loc := resp.Header.Get("Location")
		deadline := time.Now().Add(10 * time.Second)
		for {
			var st console.BulkStatus
			call(t, "GET", env.URL+loc, consoletest.AdminToken, &st)
			if st.Finished != nil {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("bulk %s not finished: %+v", query, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	st := run("action=retry&tenant=acme&state=failed")
	if st.Matched != 5 || st.Changed != 5 || st.Role != "operator" || len(st.Databases) != 3 {
		t.Errorf("bulk retry = %+v, want 5 of acme's failed jobs over 3 databases", st)
	}
	var page console.JobPage
	call(t, "GET", env.URL+"/admin/api/jobs?state=failed", consoletest.AdminToken, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].Tenant != "globex" {
		t.Errorf("failed jobs after the bulk retry = %+v, want only globex's", page.Jobs)
	}
	env.MakeUnavailable("shard-1")
	st = run("action=delete&tenant=acme")
	if st.Changed != 3 || st.Databases[2].Database != "shard-1" || st.Databases[2].Error == "" {
		t.Errorf("bulk delete with shard-1 down = %+v, want shard-0's 3 and shard-1 named", st)
	}
	if !strings.Contains(env.Audit.String(), `action="bulk retry"`) || !strings.Contains(env.Audit.String(), "outcome=finished console=cell bulk=1") ||
		!strings.Contains(env.Audit.String(), "count=5 before=failed after=available") || !strings.Contains(env.Audit.String(), "count=3 before=any after=absent") {
		t.Errorf("audit lacks the bulk lines:\n%s", env.Audit.String())
	}
}

// TestTenants: the tenants refused most, placed on their slot, shard and
// cell, with their jobs and their share of the completed ones.
func TestTenants(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	for range 3 {
		env.Rejections.Add("initech")
	}
	env.Rejections.Add("globex")
	var rep console.TenantsReport
	if st, body := call(t, "GET", env.URL+"/admin/api/tenants", consoletest.AdminToken, &rep); st != http.StatusOK {
		t.Fatalf("tenants = %d %s", st, body)
	}
	if rep.Rejections != 4 || len(rep.Tenants) != 2 || rep.Partial {
		t.Fatalf("tenants = %+v", rep)
	}
	top := rep.Tenants[0]
	if top.Tenant != "initech" || top.Rejections != 3 || top.Shard == "" || top.Cell != "cell-1" {
		t.Errorf("top tenant = %+v, want initech, 3 refusals, placed", top)
	}
	g := rep.Tenants[1]
	if g.Tenant != "globex" || g.Completed != 1 || g.CompletedShare != 1 || rep.FairShare != 1.0/3 {
		t.Errorf("globex = %+v (fair share %v); want its one completed job, all of them, of 3 tenants", g, rep.FairShare)
	}
}
