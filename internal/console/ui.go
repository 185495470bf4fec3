package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/console/consolechart"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var (
	pagesOnce sync.Once
	pages     map[string]*template.Template
	pagesErr  error
)

// parseTemplates parses every page once per process (layout + page).
func parseTemplates() error {
	pagesOnce.Do(func() {
		funcs := template.FuncMap{
			"when": func(t any) string {
				switch v := t.(type) {
				case time.Time:
					return v.UTC().Format("2006-01-02 15:04:05 UTC")
				case *time.Time:
					if v != nil {
						return v.UTC().Format("2006-01-02 15:04:05 UTC")
					}
				}
				return "—"
			},
			"age": func(d time.Duration) string {
				if d <= 0 {
					return "—"
				}
				return d.Round(time.Second).String()
			},
			"pct": func(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) },
			// num prints a limit as the tenant table holds it (2, 0.5).
			"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
			// pathEscape makes a value one path segment: html/template
			// leaves percent escapes in a URL as they are, so a queue
			// named "a/b" or "50%" reaches the handler as itself.
			"pathEscape": url.PathEscape,
			"json": func(v any) string {
				var raw []byte
				if m, ok := v.(json.RawMessage); ok {
					raw = m
				} else {
					var err error
					if raw, err = json.Marshal(v); err != nil {
						return err.Error()
					}
				}
				var out bytes.Buffer
				if json.Indent(&out, raw, "", "  ") != nil {
					return string(raw)
				}
				return out.String()
			},
		}
		pages = map[string]*template.Template{}
		for _, p := range []string{"login", "overview", "jobs", "job", "cells", "bulk", "bulkconfirm", "tenants", "failure"} {
			t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
			if err != nil {
				pagesErr = fmt.Errorf("console: template %s: %w", p, err)
				return
			}
			pages[p] = t
		}
	})
	return pagesErr
}

// view is what every page template gets.
type view struct {
	Title, Nav string
	Role       string // "" on the login page
	CanAct     bool
	CSRF       string
	Cell       string
	Flash      string
	Failure    string
	Refresh    int  // seconds; 0 = no auto-refresh
	OIDC       bool // the login page offers the OpenID provider
	Data       any
	status     int
	page       string
}

// flashes are the only messages a page shows for a ?flash= code: a code
// not here shows nothing, so no text from a URL reaches a page.
var flashes = map[string]string{
	"paused":  "The queue is paused.",
	"resumed": "The queue is resumed.",
	"retry":   "The job will run again.",
	"cancel":  "The job is cancelled.",
	"delete":  "The job is deleted.",

	"tenant-saved":     "The tenant's plan and overrides are saved; every process of the cell applies them within 2 seconds.",
	"tenant-unchanged": "Nothing changed: the form matched the tenant's row.",
}

// flash is the message of a request's ?flash= code ("" for none).
func flash(ec echo.Context) string { return flashes[ec.QueryParam("flash")] }

// withHeaders sets the headers every console answer carries (no-store,
// nosniff, no-referrer), redirects and errors included.
func withHeaders(h echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		consoleauth.SetHeaders(ec.Response().Header())
		return h(ec)
	}
}

// headerWriter sets the console's headers again as the head is written:
// http.FileServer's errors drop Cache-Control.
type headerWriter struct{ http.ResponseWriter }

func (h headerWriter) WriteHeader(code int) {
	consoleauth.SetHeaders(h.Header())
	h.ResponseWriter.WriteHeader(code)
}

// staticFiles serves the embedded stylesheet: files only, no listing.
func staticFiles() http.Handler {
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(noDirs{static})))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { files.ServeHTTP(headerWriter{w}, r) })
}

// noDirs serves the files of an fs.FS and nothing that is a directory, so
// /admin/static/ lists nothing.
type noDirs struct{ fs.FS }

func (n noDirs) Open(name string) (fs.File, error) {
	f, err := n.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, fs.ErrNotExist
	}
	return f, nil
}

func (c *Console) registerUI(e *echo.Echo) {
	get := func(p string, h echo.HandlerFunc) { e.GET(p, withHeaders(h)) }
	post := func(p string, h echo.HandlerFunc) { e.POST(p, withHeaders(h)) }
	get(Prefix+"static/*", echo.WrapHandler(staticFiles()))
	get("/admin", func(ec echo.Context) error { return ec.Redirect(http.StatusSeeOther, Prefix) })
	get(Prefix+"login", func(ec echo.Context) error {
		return c.render(ec, c.loginView("", 0))
	})
	post(Prefix+"login", c.login)
	if c.auth.OIDCEnabled() {
		get(Prefix+"oidc/login", c.oidcLogin)
		get(Prefix+"oidc/callback", c.oidcCallback)
	}
	post(Prefix+"logout", c.page(RoleReader, func(ec echo.Context, w who) error {
		if err := c.auth.Logout(ec.Request().Context(), w); err != nil {
			return c.storeDown(ec, err)
		}
		ec.SetCookie(c.auth.SessionCookie(ec.Request(), ""))
		return ec.Redirect(http.StatusSeeOther, Prefix+"login")
	}))
	get(Prefix, c.page(RoleReader, c.overviewPage))
	get(Prefix+"jobs", c.page(RoleReader, c.jobsPage))
	get(Prefix+"jobs/:db/:id", c.page(RoleReader, c.jobPage))
	post(Prefix+"jobs/:db/:id/:action", c.page(RoleOperator, c.actPage))
	post(Prefix+"queues/:queue/:action", c.page(RoleOperator, c.queueActPage))
	post(Prefix+"bulk", c.page(RoleOperator, c.bulkPage))
	get(Prefix+"bulk/:id", c.page(RoleReader, func(ec echo.Context, w who) error {
		st, ok := c.bulk.get(ec.Param("id"))
		if !ok {
			return c.render(ec, c.failure(w, http.StatusNotFound, "no such bulk action"))
		}
		v := c.view(w, "bulk", "Bulk "+string(st.Action), st)
		v.Nav = "jobs"
		if st.Finished == nil {
			v.Refresh = 2
		}
		return c.render(ec, v)
	}))
	get(Prefix+"tenants", c.page(RoleReader, func(ec echo.Context, w who) error {
		v := c.view(w, "tenants", "Tenants", map[string]any{"Report": c.tenants(ec.Request().Context()), "Charts": c.tenantCharts()})
		v.Flash = flash(ec)
		return c.render(ec, v)
	}))
	post(Prefix+"tenants", c.page(RoleOperator, c.tenantChangePage))
	// Anything else below /admin/ is a 404 that says nothing, with the
	// console's headers like every other answer.
	e.Any(Prefix+"*", withHeaders(func(echo.Context) error { return echo.ErrNotFound }))
	get(Prefix+"cells", c.page(RoleReader, func(ec echo.Context, w who) error {
		return c.render(ec, c.view(w, "cells", "Cells", map[string]any{"Slots": c.liveReport(), "Lanes": c.lanes(), "Admission": c.admission()}))
	}))
}

// page guards a page: a browser without a session goes to the login page;
// a throttled source gets 429; a read-only user gets 403 for an action;
// every POST needs its CSRF token.
func (c *Console) page(need Role, h func(echo.Context, who) error) echo.HandlerFunc {
	return func(ec echo.Context) error {
		w, ref, err := c.auth.Identify(ec.Request())
		if err != nil {
			return c.storeDown(ec, err)
		}
		if ref != nil {
			if ref.Status == http.StatusTooManyRequests {
				ref.SetRetryAfter(ec.Response().Header())
				return c.render(ec, c.loginView(throttledText(ref), ref.Status))
			}
			if ec.Request().Method == http.MethodGet {
				return ec.Redirect(http.StatusSeeOther, Prefix+"login")
			}
			return c.render(ec, c.loginView("Your session has ended; log in again.", http.StatusUnauthorized))
		}
		if need == RoleOperator && !w.Role.CanAct() {
			return c.render(ec, c.failure(w, http.StatusForbidden, "The read-only token cannot act; log in with the operator token."))
		}
		if ec.Request().Method == http.MethodPost && !c.auth.CSRFOK(ec.Request(), w) {
			return c.render(ec, c.failure(w, http.StatusForbidden, "The form's CSRF token is missing or wrong; reload the page and try again."))
		}
		return h(ec, w)
	}
}

// storeDown answers a request whose session could not be read or written:
// 503, the cause logged, not shown to a caller who may hold no session.
func (c *Console) storeDown(ec echo.Context, err error) error {
	c.log.Error("console sessions", "error", err.Error())
	return c.render(ec, c.loginView("The console's sessions are unavailable (the control database does not answer); try again shortly.", http.StatusServiceUnavailable))
}

// throttledText says how long a throttled source waits.
func throttledText(ref *consoleauth.Refusal) string {
	return fmt.Sprintf("Too many wrong tokens from your address; try again in %s.", max(time.Second, ref.RetryAfter.Round(time.Second)))
}

func (c *Console) view(w who, page, title string, data any) view {
	return view{Title: title, Nav: page, Role: w.Role.String(), CanAct: w.Role.CanAct(), CSRF: w.CSRF, Cell: c.cfg.Spec.Server.Cell, Data: data, page: page}
}

// failure is a page that only says what went wrong.
func (c *Console) failure(w who, status int, msg string) view {
	v := c.view(w, "failure", http.StatusText(status), nil)
	v.Failure, v.status = msg, status
	return v
}

func (c *Console) render(ec echo.Context, v view) error {
	var buf bytes.Buffer
	if err := pages[v.page].ExecuteTemplate(&buf, "layout", v); err != nil {
		return err
	}
	if v.status == 0 {
		v.status = http.StatusOK
	}
	consoleauth.SetPageHeaders(ec.Response().Header())
	return ec.HTMLBlob(v.status, buf.Bytes())
}

// loginView is the login page, with a failure and its status.
func (c *Console) loginView(failure string, status int) view {
	return view{Title: "Log in", page: "login", Failure: failure, status: status, OIDC: c.auth.OIDCEnabled()}
}

// oidcLogin sends the browser to the OpenID provider.
func (c *Console) oidcLogin(ec echo.Context) error {
	ck, to, err := c.auth.OIDCStart(ec.Request())
	if err != nil {
		return c.render(ec, c.loginView("The OpenID provider does not answer; try again shortly, or log in with a token.", http.StatusServiceUnavailable))
	}
	ec.SetCookie(ck)
	return ec.Redirect(http.StatusSeeOther, to)
}

// oidcCallback trades the provider's code for a fresh session.
func (c *Console) oidcCallback(ec echo.Context) error {
	_, cookie, clear, ref, err := c.auth.OIDCCallback(ec.Request())
	if clear != nil {
		ec.SetCookie(clear)
	}
	switch {
	case errors.Is(err, consoleauth.ErrProvider):
		return c.render(ec, c.loginView("The OpenID provider does not answer; try again shortly, or log in with a token.", http.StatusServiceUnavailable))
	case err != nil:
		return c.storeDown(ec, err)
	case ref != nil && ref.Status == http.StatusForbidden:
		return c.render(ec, c.loginView("The OpenID provider names you, but your groups give you no role in this console.", ref.Status))
	case ref != nil:
		return c.render(ec, c.loginView("The OpenID login failed or expired; try again.", ref.Status))
	}
	ec.SetCookie(c.auth.SessionCookie(ec.Request(), cookie))
	consoleauth.WriteContinue(ec.Response(), Prefix)
	return nil
}

// login trades a token (the form's body only) for a fresh session.
func (c *Console) login(ec echo.Context) error {
	_, cookie, ref, err := c.auth.Login(ec.Request())
	switch {
	case err != nil:
		return c.storeDown(ec, err)
	case ref != nil && ref.Status == http.StatusTooManyRequests:
		ref.SetRetryAfter(ec.Response().Header())
		return c.render(ec, c.loginView(throttledText(ref), ref.Status))
	case ref != nil:
		return c.render(ec, c.loginView("That token is not the admin or the operator token.", http.StatusUnauthorized))
	}
	ec.SetCookie(c.auth.SessionCookie(ec.Request(), cookie))
	return ec.Redirect(http.StatusSeeOther, Prefix)
}

func (c *Console) overviewPage(ec echo.Context, w who) error {
	q := c.queues(ec.Request().Context())
	v := c.view(w, "overview", "Overview", map[string]any{"Queues": q, "Chart": stateChart(q), "Series": c.cellCharts(), "CountAge": q.CountAge.Round(100 * time.Millisecond).String()})
	v.Refresh = 10
	v.Flash = flash(ec)
	return c.render(ec, v)
}

func (c *Console) jobsPage(ec echo.Context, w who) error {
	v := c.view(w, "jobs", "Jobs", nil)
	v.Flash = flash(ec)
	q, err := queryFrom(ec.QueryParams())
	var page JobPage
	if err == nil {
		page, err = c.jobs(ec.Request().Context(), q)
	}
	if err != nil {
		v.Failure, v.status = err.Error(), http.StatusBadRequest
	}
	names := make([]string, len(c.cfg.Databases))
	for i, db := range c.cfg.Databases {
		names[i] = db.Name()
	}
	next := ""
	if page.NextCursor != "" {
		vals := q.values()
		vals.Set("cursor", page.NextCursor)
		next = Prefix + "jobs?" + vals.Encode()
	}
	v.Data = map[string]any{
		"Query": q, "Page": page, "Names": names, "Next": next,
		"Filtered": BulkFilter{State: q.State, Kind: q.Kind, Queue: q.Queue, Tenant: q.Tenant}.Real(),
		"From":     rangeValue(q.From), "To": rangeValue(q.To),
		"States": []pgjobs.State{pgjobs.StateAvailable, pgjobs.StateRunning, pgjobs.StateCompleted, pgjobs.StateFailed},
	}
	return c.render(ec, v)
}

// actionsFor lists the actions a job's state allows (a running job none).
func actionsFor(s pgjobs.State) []pgjobs.Act {
	switch s {
	case pgjobs.StateAvailable:
		return []pgjobs.Act{pgjobs.ActRetry, pgjobs.ActCancel, pgjobs.ActDelete}
	case pgjobs.StateCompleted, pgjobs.StateFailed:
		return []pgjobs.Act{pgjobs.ActRetry, pgjobs.ActDelete}
	}
	return nil
}

func (c *Console) jobPage(ec echo.Context, w who) error {
	db, id, bad := c.jobRef(ec)
	if bad != nil {
		return c.render(ec, c.failure(w, http.StatusNotFound, bad.Error))
	}
	j, err := c.job(ec.Request().Context(), db, id)
	if err != nil {
		st, body := errorStatus(db, err)
		return c.render(ec, c.failure(w, st, body.Error))
	}
	v := c.view(w, "job", fmt.Sprintf("Job %d on %s", j.ID, j.Database), map[string]any{"Job": j, "Actions": actionsFor(j.State)})
	v.Nav = "jobs"
	v.Flash = flash(ec)
	return c.render(ec, v)
}

func (c *Console) actPage(ec echo.Context, w who) error {
	db, id, bad := c.jobRef(ec)
	if bad != nil {
		return c.render(ec, c.failure(w, http.StatusNotFound, bad.Error))
	}
	act := pgjobs.Act(ec.Param("action"))
	if err := c.act(ec.Request().Context(), w, db, id, act); err != nil {
		st, body := errorStatus(db, err)
		return c.render(ec, c.failure(w, st, body.Error))
	}
	if act == pgjobs.ActDelete {
		return ec.Redirect(http.StatusSeeOther, Prefix+"jobs?"+url.Values{"database": {db.Name()}, "flash": {string(act)}}.Encode())
	}
	return ec.Redirect(http.StatusSeeOther, fmt.Sprintf("%sjobs/%s/%d?flash=%s", Prefix, url.PathEscape(db.Name()), id, act))
}

// chartStates are the chart's states, in bar order, with their colors.
var chartStates = []consolechart.Key{
	{Name: "available", Color: "#b54708"}, {Name: "running", Color: "#175cd3"}, {Name: "completed", Color: "#2e8540"}, {Name: "failed", Color: "#b42318"},
}

// stateChart draws the jobs of every database by state as horizontal
// stacked bars, on the server: the page needs no script to show it.
func stateChart(q QueuesReport) template.HTML {
	rows := make([]consolechart.Bar, len(q.Databases))
	for i, db := range q.Databases {
		rows[i].Label = db.Database
		if db.Error != "" {
			rows[i].Missing = "no answer"
			continue
		}
		v := make([]int64, 4)
		for _, d := range db.Queues {
			v[0] += d.Available
			v[1] += d.Running
			v[2] += d.Completed
			v[3] += d.Failed
		}
		rows[i].Values = v
	}
	return consolechart.Bars("chart", "jobs by state per database", chartStates, rows)
}
