package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// apiError is the body of every API error: no data, only what went wrong.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func (c *Console) registerAPI(e *echo.Echo) {
	get := func(p string, h echo.HandlerFunc) { e.GET(p, withHeaders(h)) }
	post := func(p string, h echo.HandlerFunc) { e.POST(p, withHeaders(h)) }
	get(APIPrefix+"jobs", c.api(RoleReader, c.apiJobs))
	get(APIPrefix+"jobs/:db/:id", c.api(RoleReader, c.apiJob))
	post(APIPrefix+"jobs/:db/:id/:action", c.api(RoleOperator, c.apiAct))
	post(APIPrefix+"bulk", c.api(RoleOperator, c.apiBulk))
	get(APIPrefix+"bulk/:id", c.api(RoleReader, func(ec echo.Context, _ who) error {
		st, ok := c.bulk.get(ec.Param("id"))
		if !ok {
			return ec.JSON(http.StatusNotFound, apiError{"no such bulk action", "console_not_found"})
		}
		return ec.JSON(http.StatusOK, st)
	}))
	get(APIPrefix+"queues", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.queues(ec.Request().Context()))
	}))
	post(APIPrefix+"queues/:queue/:action", c.api(RoleOperator, c.apiQueueAct))
	get(APIPrefix+"tenants", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.tenants(ec.Request().Context()))
	}))
	post(APIPrefix+"tenants/:tenant", c.api(RoleOperator, c.apiTenantChange))
	get(APIPrefix+"admission", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.admission())
	}))
	get(APIPrefix+"slots", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.liveReport())
	}))
	get(APIPrefix+"lanes", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.lanes())
	}))
	get(APIPrefix+"series", c.api(RoleReader, func(ec echo.Context, _ who) error {
		return ec.JSON(http.StatusOK, c.series())
	}))
}

func (c *Console) admission() any {
	if c.cfg.Admission == nil {
		return map[string]any{}
	}
	return c.cfg.Admission()
}

// api guards an API handler: 401 without a valid token or session, 429
// for a source in backoff (consoleauth.Limiter), 403
// when the role may not do this, 403 for a session's action without its
// CSRF token. Refusals carry no data.
func (c *Console) api(need Role, h func(echo.Context, who) error) echo.HandlerFunc {
	return func(ec echo.Context) error {
		w, ref, err := c.auth.Identify(ec.Request())
		if err != nil {
			c.log.Error("console sessions", "error", err.Error())
			return ec.JSON(http.StatusServiceUnavailable, apiError{consoleauth.ErrStore.Error(), "console_sessions_unavailable"})
		}
		if ref != nil && ref.Status == http.StatusTooManyRequests {
			ref.SetRetryAfter(ec.Response().Header())
			return ec.JSON(http.StatusTooManyRequests, apiError{"too many wrong tokens from this address; retry later", "console_throttled"})
		}
		if ref != nil {
			ec.Response().Header().Set("WWW-Authenticate", `Bearer realm="cellgate-console"`)
			return ec.JSON(http.StatusUnauthorized, apiError{"console token required", "console_unauthorized"})
		}
		if need == RoleOperator && !w.Role.CanAct() {
			return ec.JSON(http.StatusForbidden, apiError{"the read-only token cannot act; use the operator token", "console_forbidden"})
		}
		if ec.Request().Method == http.MethodPost && !c.auth.CSRFOK(ec.Request(), w) {
			return ec.JSON(http.StatusForbidden, apiError{"missing or wrong CSRF token", "console_csrf"})
		}
		return h(ec, w)
	}
}

func (c *Console) apiJobs(ec echo.Context, _ who) error {
	q, err := queryFrom(ec.QueryParams())
	if err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_query"})
	}
	page, err := c.jobs(ec.Request().Context(), q)
	if err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_query"})
	}
	return ec.JSON(http.StatusOK, page)
}

// jobRef reads :db and :id.
func (c *Console) jobRef(ec echo.Context) (Database, jobs.JobID, *apiError) {
	db := c.dbs[ec.Param("db")]
	if db == nil {
		return nil, 0, &apiError{"no database " + strconv.Quote(ec.Param("db")), "console_not_found"}
	}
	id, err := strconv.ParseInt(ec.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return nil, 0, &apiError{"job id: want a positive integer", "console_not_found"}
	}
	return db, jobs.JobID(id), nil
}

// job reads one job under the database timeout.
func (c *Console) job(ctx context.Context, db Database, id jobs.JobID) (pgjobs.JobInfo, error) {
	if !db.Ready() {
		return pgjobs.JobInfo{}, pgjobs.ErrNotReady
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DatabaseTimeout)
	defer cancel()
	return db.Job(ctx, id)
}

func (c *Console) apiJob(ec echo.Context, _ who) error {
	db, id, bad := c.jobRef(ec)
	if bad != nil {
		return ec.JSON(http.StatusNotFound, bad)
	}
	j, err := c.job(ec.Request().Context(), db, id)
	if err != nil {
		st, body := errorStatus(db, err)
		return ec.JSON(st, body)
	}
	return ec.JSON(http.StatusOK, j)
}

// ActionResult is the answer to an action.
type ActionResult struct {
	// Database and ID name the job; Action what was done.
	Database string     `json:"database"`
	ID       jobs.JobID `json:"id"`
	Action   pgjobs.Act `json:"action"`
}

func (c *Console) apiAct(ec echo.Context, w who) error {
	db, id, bad := c.jobRef(ec)
	if bad != nil {
		return ec.JSON(http.StatusNotFound, bad)
	}
	act := pgjobs.Act(ec.Param("action"))
	if err := c.act(ec.Request().Context(), w, db, id, act); err != nil {
		st, body := errorStatus(db, err)
		return ec.JSON(st, body)
	}
	return ec.JSON(http.StatusOK, ActionResult{Database: db.Name(), ID: id, Action: act})
}

var errUnknownAction = errors.New("unknown action; want retry, cancel or delete")

// act runs one action under the database timeout and writes its audit line.
func (c *Console) act(ctx context.Context, w who, db Database, id jobs.JobID, act pgjobs.Act) error {
	var fn func(context.Context, jobs.JobID) error
	switch act {
	case pgjobs.ActRetry:
		fn = db.RetryJob
	case pgjobs.ActCancel:
		fn = db.CancelJob
	case pgjobs.ActDelete:
		fn = db.DeleteJob
	default:
		return errUnknownAction
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DatabaseTimeout)
	defer cancel()
	before := jobState(ctx, db, id)
	err := fn(ctx, id)
	count := 1
	outcome := "ok"
	if err != nil {
		count, outcome = 0, err.Error()
	}
	consoleauth.Audit(c.log, slog.LevelInfo, w, string(act), outcome, "console", "cell", "database", db.Name(),
		"filter", "id="+strconv.FormatInt(int64(id), 10), "count", count,
		"before", before, "after", jobState(ctx, db, id))
	return err
}

// jobState is the job's state for an audit line: "absent" when there is
// no such job (deleted, or never was), "unknown" when the database did not
// answer. Read around an action rather than returned by it, it is what an
// operator reading the job would have seen just before and just after.
func jobState(ctx context.Context, db Database, id jobs.JobID) string {
	j, err := db.Job(ctx, id)
	switch {
	case errors.Is(err, pgjobs.ErrJobNotFound):
		return "absent"
	case err != nil:
		return "unknown"
	}
	return string(j.State)
}

// errorStatus maps a database call's error to a status and a body that
// names the database.
func errorStatus(db Database, err error) (int, apiError) {
	msg := db.Name() + ": " + err.Error()
	switch {
	case errors.Is(err, errUnknownAction):
		return http.StatusNotFound, apiError{err.Error(), "console_not_found"}
	case errors.Is(err, pgjobs.ErrJobNotFound):
		return http.StatusNotFound, apiError{msg, "console_not_found"}
	case errors.Is(err, pgjobs.ErrJobState):
		return http.StatusConflict, apiError{msg, "console_job_state"}
	}
	return http.StatusServiceUnavailable, apiError{msg, "console_database_unavailable"}
}

// bulkFrom reads a bulk action's action and filter from the query or form.
func bulkFrom(ec echo.Context) (pgjobs.Act, BulkFilter, error) {
	f := BulkFilter{
		Database: ec.FormValue("database"), State: pgjobs.State(ec.FormValue("state")),
		Kind: ec.FormValue("kind"), Queue: ec.FormValue("queue"), Tenant: ec.FormValue("tenant"),
	}
	q, err := queryFrom(url.Values{"state": {string(f.State)}, "from": {ec.FormValue("from")}, "to": {ec.FormValue("to")}})
	if err != nil {
		return "", f, err
	}
	f.From, f.To = q.From, q.To
	return pgjobs.Act(ec.FormValue("action")), f, nil
}

// apiBulk is a bulk action in two calls: without "confirm" it answers 200
// with the count it would touch and a confirmation; with that confirmation
// in the POST body (same action, filter and credential, within
// confirmTTL) it starts: 202 with its status.
func (c *Console) apiBulk(ec echo.Context, w who) error {
	act, f, err := bulkFrom(ec)
	if err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_query"})
	}
	confirm := ec.Request().PostFormValue("confirm")
	if confirm == "" {
		p, err := c.previewBulk(ec.Request().Context(), w, act, f)
		if err != nil {
			return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_query"})
		}
		return ec.JSON(http.StatusOK, p)
	}
	if err := c.checkConfirmation(w, act, f, confirm); err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_confirmation"})
	}
	st, err := c.startBulk(w, act, f)
	switch {
	case errors.Is(err, errBulkFull):
		return ec.JSON(http.StatusTooManyRequests, apiError{err.Error(), "console_bulk_full"})
	case err != nil:
		return ec.JSON(http.StatusBadRequest, apiError{err.Error(), "console_bad_query"})
	}
	ec.Response().Header().Set(echo.HeaderLocation, APIPrefix+"bulk/"+st.ID)
	return ec.JSON(http.StatusAccepted, st)
}

// bulkPage is the job list's bulk form: the first post shows how many jobs
// the action would touch and asks to confirm; the confirmation starts it
// and shows its progress.
func (c *Console) bulkPage(ec echo.Context, w who) error {
	act, f, err := bulkFrom(ec)
	if err != nil {
		return c.render(ec, c.failure(w, http.StatusBadRequest, err.Error()))
	}
	if confirm := ec.Request().PostFormValue("confirm"); confirm != "" {
		if err := c.checkConfirmation(w, act, f, confirm); err != nil {
			return c.render(ec, c.failure(w, http.StatusBadRequest, err.Error()))
		}
		st, err := c.startBulk(w, act, f)
		if err != nil {
			return c.render(ec, c.failure(w, http.StatusBadRequest, err.Error()))
		}
		return ec.Redirect(http.StatusSeeOther, Prefix+"bulk/"+st.ID)
	}
	p, err := c.previewBulk(ec.Request().Context(), w, act, f)
	if err != nil {
		return c.render(ec, c.failure(w, http.StatusBadRequest, err.Error()))
	}
	v := c.view(w, "bulkconfirm", "Confirm: "+string(act)+" all", map[string]any{"Preview": p, "From": rangeValue(f.From), "To": rangeValue(f.To)})
	v.Nav = "jobs"
	return c.render(ec, v)
}
