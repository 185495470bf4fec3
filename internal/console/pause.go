package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// The queue actions: pause and resume (POST …/queues/{queue}/{action}).
const (
	actPause  = "pause"
	actResume = "resume"
)

// PauseResult is the answer to a pause or a resume.
type PauseResult struct {
	// Queue is the queue acted on; Action "pause" or "resume".
	Queue  string `json:"queue"`
	Action string `json:"action"`
	// Databases are those acted on, in the cell's order: every database
	// that can pause queues, or the one the request named.
	Databases []PauseOutcome `json:"databases"`
	// Partial is true when a database failed.
	Partial bool `json:"partial"`
}

// PauseOutcome is one database's part of a PauseResult.
type PauseOutcome struct {
	DatabaseStatus
	// Changed: the queue was not already in the asked state there.
	Changed bool `json:"changed"`
}

// Errors of a queue action; the API maps them to statuses.
var (
	errNoPause  = errors.New("this cell's jobs backend cannot pause queues (the local backend keeps its jobs in one process's memory; pausing needs jobs.backend = \"postgres\")")
	errNoQueue  = errors.New("the queue name is empty")
	errQueueAct = errors.New("unknown queue action; want pause or resume")
)

// errNoDatabase names a database the cell does not have.
type errNoDatabase string

func (e errNoDatabase) Error() string { return "no database " + strconv.Quote(string(e)) }

// pausers returns the databases a queue action applies to: the one named
// (when database is not "") or every one that can pause queues.
func (c *Console) pausers(database string) ([]Database, error) {
	if database != "" {
		db := c.dbs[database]
		if db == nil {
			return nil, errNoDatabase(database)
		}
		if _, ok := db.(jobs.QueuePauser); !ok {
			return nil, errNoPause
		}
		return []Database{db}, nil
	}
	var out []Database
	for _, db := range c.cfg.Databases {
		if _, ok := db.(jobs.QueuePauser); ok {
			out = append(out, db)
		}
	}
	if len(out) == 0 {
		return nil, errNoPause
	}
	return out, nil
}

// queueAct pauses or resumes queue on the databases pausers picks, each
// under the database timeout, and writes one audit line per database.
func (c *Console) queueAct(ctx context.Context, w who, action, queue, database string) (PauseResult, error) {
	if action != actPause && action != actResume {
		return PauseResult{}, errQueueAct
	}
	if queue == "" {
		return PauseResult{}, errNoQueue
	}
	dbs, err := c.pausers(database)
	if err != nil {
		return PauseResult{}, err
	}
	parts := fanOut(ctx, dbs, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) (bool, error) {
		p := db.(jobs.QueuePauser)
		if action == actPause {
			return p.PauseQueue(ctx, queue)
		}
		return p.ResumeQueue(ctx, queue)
	})
	st, partial := statuses(parts)
	res := PauseResult{Queue: queue, Action: action, Partial: partial, Databases: make([]PauseOutcome, len(parts))}
	for i, p := range parts {
		res.Databases[i] = PauseOutcome{DatabaseStatus: st[i], Changed: p.val && p.err == nil}
		count, outcome := 0, "ok"
		// The queue's state on this database before and after: a change
		// flips it; "already paused" means it was as asked; an error
		// leaves it unknown.
		target, other := "paused", "active"
		if action == actResume {
			target, other = other, target
		}
		before, after := target, target
		switch {
		case p.err != nil:
			outcome, before, after = p.err.Error(), "unknown", "unknown"
		case p.val:
			count, before = 1, other
		default:
			outcome = "already " + action + "d"
		}
		consoleauth.Audit(c.log, slog.LevelInfo, w, action, outcome, "console", "cell", "database", p.db.Name(),
			"filter", "queue="+strconv.Quote(queue), "count", count, "before", before, "after", after)
	}
	return res, nil
}

// queueParam reads the :queue path parameter once decoded. Echo routes on
// the raw path (and leaves parameters escaped) only when the request's
// path has escapes that differ from the default encoding (RawPath set, as
// for a "/" sent as %2F); otherwise it routes on the decoded path, and
// decoding again would turn a queue named "50%25" into "50%".
func queueParam(ec echo.Context) (string, error) {
	q := ec.Param("queue")
	if ec.Request().URL.RawPath == "" {
		return q, nil
	}
	return url.PathUnescape(q)
}

func (c *Console) apiQueueAct(ec echo.Context, w who) error {
	queue, err := queueParam(ec)
	if err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{"queue: " + err.Error(), "console_bad_query"})
	}
	res, err := c.queueAct(ec.Request().Context(), w, ec.Param("action"), queue, ec.QueryParam("database"))
	if err != nil {
		st, body := queueActStatus(err)
		return ec.JSON(st, body)
	}
	// One database asked for and it failed: no partial answer to give.
	if ec.QueryParam("database") != "" && res.Partial {
		return ec.JSON(http.StatusServiceUnavailable, apiError{res.Databases[0].Database + ": " + res.Databases[0].Error, "console_database_unavailable"})
	}
	return ec.JSON(http.StatusOK, res)
}

// queueActStatus maps queueAct's refusals to a status and a body.
func queueActStatus(err error) (int, apiError) {
	var nodb errNoDatabase
	switch {
	case errors.Is(err, errNoPause):
		return http.StatusNotImplemented, apiError{err.Error(), "console_not_implemented"}
	case errors.Is(err, errQueueAct), errors.As(err, &nodb):
		return http.StatusNotFound, apiError{err.Error(), "console_not_found"}
	}
	return http.StatusBadRequest, apiError{err.Error(), "console_bad_query"}
}

// queueActPage is the overview's pause and resume buttons: the action, then
// back to the overview, which says what was done.
func (c *Console) queueActPage(ec echo.Context, w who) error {
	queue, err := queueParam(ec)
	if err != nil {
		return c.render(ec, c.failure(w, http.StatusBadRequest, "queue: "+err.Error()))
	}
	database := ec.FormValue("database")
	res, err := c.queueAct(ec.Request().Context(), w, ec.Param("action"), queue, database)
	if err != nil {
		st, body := queueActStatus(err)
		return c.render(ec, c.failure(w, st, body.Error))
	}
	if res.Partial {
		var msgs []string
		for _, d := range res.Databases {
			if d.Error != "" {
				msgs = append(msgs, d.Database+": "+d.Error)
			}
		}
		return c.render(ec, c.failure(w, http.StatusServiceUnavailable,
			fmt.Sprintf("%s of queue %q failed on %s", res.Action, queue, strings.Join(msgs, "; "))))
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"?flash="+res.Action+"d")
}

// pausedAll reads the paused queues of every database that can pause
// queues, at once and under the database timeout; the answer comes on the
// channel, indexed as c.cfg.Databases (nil for a database that cannot).
func (c *Console) pausedAll(ctx context.Context) <-chan []part[[]string] {
	ch := make(chan []part[[]string], 1)
	go func() {
		ch <- fanOut(ctx, c.cfg.Databases, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) ([]string, error) {
			p, ok := db.(jobs.QueuePauser)
			if !ok {
				return nil, nil
			}
			return p.PausedQueues(ctx)
		})
	}()
	return ch
}

// markPaused marks the paused queues of rep (read fresh, not from any count
// cache, so a pause shows at once) and adds the paused queues that have no
// jobs, so they can be resumed from the page. A database whose depths
// answered but whose paused queues did not carries that error.
func (c *Console) markPaused(rep *QueuesReport, paused []part[[]string]) {
	for i := range rep.Databases {
		d := &rep.Databases[i]
		_, d.Pausable = c.cfg.Databases[i].(jobs.QueuePauser)
		if d.Error != "" {
			continue
		}
		if err := paused[i].err; err != nil {
			d.Error, rep.Partial = "paused queues: "+err.Error(), true
			continue
		}
		for _, q := range paused[i].val {
			k := slices.IndexFunc(d.Queues, func(x pgjobs.QueueDepth) bool { return x.Queue == q })
			if k < 0 {
				d.Queues = append(d.Queues, pgjobs.QueueDepth{Queue: q})
				k = len(d.Queues) - 1
			}
			d.Queues[k].Paused = true
		}
		slices.SortStableFunc(d.Queues, func(a, b pgjobs.QueueDepth) int { return strings.Compare(a.Queue, b.Queue) })
	}
}
