package console_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/console"
	"github.com/cellgate/cellgate/internal/console/consoletest"
)

// pausedIn returns, per database, the queues the queues answer marks
// paused.
func pausedIn(t *testing.T, env *consoletest.Env) map[string][]string {
	t.Helper()
	var q console.QueuesReport
	if st, body := call(t, "GET", env.URL+"/admin/api/queues", consoletest.AdminToken, &q); st != http.StatusOK {
		t.Fatalf("GET queues = %d %s", st, body)
	}
	out := map[string][]string{}
	for _, d := range q.Databases {
		if !d.Pausable {
			t.Errorf("database %s is not pausable", d.Database)
		}
		for _, x := range d.Queues {
			if x.Paused {
				out[d.Database] = append(out[d.Database], x.Queue)
			}
		}
	}
	return out
}

// TestQueuePause: pause and resume through the API, in one database or in
// all; the queues answer marks the queue paused (a paused queue without
// jobs is listed); the read-only token cannot act; each database acted on
// gets an audit line; a database that is down fails its part.
func TestQueuePause(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	base := env.URL + "/admin/api/queues/billing/"
	if st, _ := call(t, "POST", base+"pause", consoletest.AdminToken, nil); st != http.StatusForbidden {
		t.Errorf("read-only pause = %d, want 403", st)
	}
	if st, _ := call(t, "POST", base+"pause", "", nil); st != http.StatusUnauthorized {
		t.Errorf("anonymous pause = %d, want 401", st)
	}
	var res console.PauseResult
	if st, body := call(t, "POST", base+"pause?database=shard-1", consoletest.OperatorToken, &res); st != http.StatusOK {
		t.Fatalf("pause on shard-1 = %d %s", st, body)
	}
	if res.Queue != "billing" || res.Action != "pause" || len(res.Databases) != 1 || !res.Databases[0].Changed || res.Partial {
		t.Errorf("pause on shard-1 = %+v", res)
	}
	if got := pausedIn(t, env); len(got) != 1 || strings.Join(got["shard-1"], ",") != "billing" {
		t.Errorf("paused after pausing billing on shard-1 = %v", got)
	}
	// In every database: control and shard-0 have no billing job; it is
	// listed paused there all the same.
	if st, body := call(t, "POST", base+"pause", consoletest.OperatorToken, &res); st != http.StatusOK || len(res.Databases) != 3 {
		t.Fatalf("pause everywhere = %d %s", st, body)
	}
	for _, d := range res.Databases {
		if d.Changed != (d.Database != "shard-1") {
			t.Errorf("pause everywhere, %s changed = %v", d.Database, d.Changed)
		}
	}
	if got := pausedIn(t, env); len(got) != 3 || got["control"][0] != "billing" {
		t.Errorf("paused after pausing billing everywhere = %v", got)
	}
	if st, _ := call(t, "POST", base+"resume?database=shard-0", consoletest.OperatorToken, &res); st != http.StatusOK || !res.Databases[0].Changed {
		t.Errorf("resume on shard-0 = %d %+v", st, res)
	}
	if got := pausedIn(t, env); len(got) != 2 || got["shard-0"] != nil {
		t.Errorf("paused after resuming shard-0 = %v", got)
	}
	for _, bad := range []struct {
		path string
		want int
	}{
		{"billing/explode", http.StatusNotFound},
		{"billing/pause?database=shard-9", http.StatusNotFound},
	} {
		if st, _ := call(t, "POST", env.URL+"/admin/api/queues/"+bad.path, consoletest.OperatorToken, nil); st != bad.want {
			t.Errorf("POST %s = %d, want %d", bad.path, st, bad.want)
		}
	}
	audit := env.Audit.String()
	for _, want := range []string{
		`role=operator actor=operator-token remote=127.0.0.1 action=pause outcome=ok console=cell database=shard-1 filter="queue=\"billing\"" count=1 before=active after=paused`,
		`action=pause outcome="already paused" console=cell database=shard-1 filter="queue=\"billing\"" count=0 before=paused after=paused`,
		`action=resume outcome=ok console=cell database=shard-0 filter="queue=\"billing\"" count=1 before=paused after=active`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit)
		}
	}

	env.MakeUnavailable("shard-1")
	if st, body := call(t, "POST", base+"resume?database=shard-1", consoletest.OperatorToken, nil); st != http.StatusServiceUnavailable || !strings.Contains(body, "shard-1") {
		t.Errorf("resume on the down shard = %d %s, want 503 naming it", st, body)
	}
	if st, body := call(t, "POST", base+"resume", consoletest.OperatorToken, &res); st != http.StatusOK || !res.Partial || res.Databases[2].Error == "" || !res.Databases[0].Changed {
		t.Errorf("resume everywhere with shard-1 down = %d %s, want a partial answer naming shard-1", st, body)
	}
}

// TestQueuePauseEscapedName: queue names with "%", "/" and spaces reach the
// backend as themselves, through the API (escaped once, decoded once) and
// through the overview's forms (whose URLs escape the name).
func TestQueuePauseEscapedName(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	names := []string{"50%off", "x%2Fy", "a/b%c", "sp ace", "%41"}
	for _, n := range names {
		env.Seed("shard-0", consoletest.Job{Kind: "k", Queue: n})
	}
	for _, n := range names {
		var res console.PauseResult
		u := env.URL + "/admin/api/queues/" + url.PathEscape(n) + "/pause?database=shard-0"
		if st, body := call(t, "POST", u, consoletest.OperatorToken, &res); st != http.StatusOK || res.Queue != n {
			t.Fatalf("pause %q = %d %s", n, st, body)
		}
		got := pausedIn(t, env)["shard-0"]
		if len(got) != 1 || got[0] != n {
			t.Fatalf("after pausing %q the paused queues are %q", n, got)
		}
		call(t, "POST", env.URL+"/admin/api/queues/"+url.PathEscape(n)+"/resume?database=shard-0", consoletest.OperatorToken, nil)
	}

	// The page: pause each through its form's own URL.
	op := newBrowser(t)
	op.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	_, body := op.get(env.URL + "/admin/")
	csrf := csrfRe.FindStringSubmatch(body)[1]
	forms := regexp.MustCompile(`<form method="post" action="([^"]+)" class="inline queue-act" data-database="shard-0" data-queue="([^"]+)">`).FindAllStringSubmatch(body, -1)
	if len(forms) != len(names) {
		t.Fatalf("overview has %d pause forms for shard-0, want %d:\n%s", len(forms), len(names), body)
	}
	for _, f := range forms {
		action, queue := html.UnescapeString(f[1]), html.UnescapeString(f[2])
		st, page := op.post(env.URL+action, url.Values{"csrf": {csrf}, "database": {"shard-0"}})
		if st != http.StatusOK || !strings.Contains(page, "The queue is paused.") {
			t.Fatalf("form %s for %q = %d:\n%s", action, queue, st, page)
		}
		got := pausedIn(t, env)["shard-0"]
		if len(got) != 1 || got[0] != queue {
			t.Fatalf("the form for %q (%s) paused %q", queue, action, got)
		}
		call(t, "POST", env.URL+"/admin/api/queues/"+url.PathEscape(queue)+"/resume", consoletest.OperatorToken, nil)
	}
}

// TestQueuePausePage: operators get pause buttons on the overview, which
// become resume buttons with a paused badge; read-only users see neither
// and cannot post the form; the form needs its CSRF token.
func TestQueuePausePage(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	seedBoth(env)
	reader := newBrowser(t)
	reader.post(env.URL+"/admin/login", url.Values{"token": {consoletest.AdminToken}})
	_, body := reader.get(env.URL + "/admin/")
	if strings.Contains(body, "queue-act") || strings.Contains(body, ">pause<") {
		t.Errorf("read-only overview offers pause buttons:\n%s", body)
	}
	readerCSRF := csrfRe.FindStringSubmatch(body)[1]
	if st, _ := reader.post(env.URL+"/admin/queues/billing/pause", url.Values{"csrf": {readerCSRF}, "database": {"shard-1"}}); st != http.StatusForbidden {
		t.Errorf("read-only pause form = %d, want 403", st)
	}

	op := newBrowser(t)
	op.post(env.URL+"/admin/login", url.Values{"token": {consoletest.OperatorToken}})
	_, body = op.get(env.URL + "/admin/")
	if n := strings.Count(body, `<button type="submit" class="pause">pause</button>`); n != 3 {
		t.Errorf("operator's overview has %d pause buttons, want 3 (one per queue):\n%s", n, body)
	}
	csrf := csrfRe.FindStringSubmatch(body)[1]
	if st, _ := op.post(env.URL+"/admin/queues/billing/pause", url.Values{"database": {"shard-1"}}); st != http.StatusForbidden {
		t.Errorf("pause without the CSRF token = %d, want 403", st)
	}
	st, body := op.post(env.URL+"/admin/queues/billing/pause", url.Values{"csrf": {csrf}, "database": {"shard-1"}})
	if st != http.StatusOK || !strings.Contains(body, `The queue is paused.`) ||
		!strings.Contains(body, `data-paused="billing"`) || !strings.Contains(body, `class="resume">resume</button>`) {
		t.Fatalf("after the pause form = %d, want the overview with billing paused and a resume button:\n%s", st, body)
	}
	if strings.Count(body, `data-paused=`) != 1 {
		t.Errorf("more than one queue shown paused:\n%s", body)
	}
	st, body = op.post(env.URL+"/admin/queues/billing/resume", url.Values{"csrf": {csrf}, "database": {"shard-1"}})
	if st != http.StatusOK || strings.Contains(body, `data-paused=`) || !strings.Contains(body, "The queue is resumed.") {
		t.Errorf("after the resume form = %d:\n%s", st, body)
	}
}

// noPause is a database whose backend cannot pause queues (it hides the
// methods of jobs.QueuePauser), as with the local backend.
type noPause struct{ console.Database }

// TestQueuePauseNotImplemented: with no database that can pause queues
// (the local backend gives the console none), pause answers 501 and says
// why; the queues answer says the databases are not pausable.
func TestQueuePauseNotImplemented(t *testing.T) {
	t.Parallel()
	env := consoletest.New(t, consoletest.Options{})
	c, err := console.New(console.Config{
		AdminToken: consoletest.AdminToken, OperatorToken: consoletest.OperatorToken,
		Databases: []console.Database{noPause{env.Databases[1]}},
		Spec: config.Config{Database: config.Database{Shards: []config.Shard{{Name: "shard-0"}}},
			Jobs: config.Jobs{Backend: "postgres", Workers: 1}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	c.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, q := range []string{"", "?database=shard-0"} {
		st, body := call(t, "POST", srv.URL+"/admin/api/queues/billing/pause"+q, consoletest.OperatorToken, nil)
		if st != http.StatusNotImplemented || !strings.Contains(body, "cannot pause queues") {
			t.Errorf("pause%s without a pausing backend = %d %s, want 501", q, st, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/admin/api/queues", nil)
	req.Header.Set("Authorization", "Bearer "+consoletest.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"pausable":false`) {
		t.Errorf("queues = %s, want the database not pausable", b)
	}
}
