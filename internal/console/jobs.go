package console

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// JobQuery is a job listing's filters and page.
type JobQuery struct {
	// Database keeps one database ("" = all).
	Database string
	// State, Kind, Queue and Tenant filter as pgjobs.ListFilter does.
	State  pgjobs.State
	Kind   string
	Queue  string
	Tenant string
	// From and To keep jobs created in [From, To); zero is no bound.
	From, To time.Time
	// Limit is the page size (0 = pgjobs.DefaultListLimit).
	Limit int
	// Cursor is the previous page's NextCursor ("" = the first page).
	Cursor string
}

// JobPage is one page of jobs across the databases.
type JobPage struct {
	// Jobs are newest first (by creation, then database, then id).
	Jobs []pgjobs.JobInfo `json:"jobs"`
	// Databases names every database asked and the error of each that did
	// not answer.
	Databases []DatabaseStatus `json:"databases"`
	// Partial is true when a database did not answer: its jobs are missing.
	Partial bool `json:"partial"`
	// NextCursor fetches the next page; "" when every database that
	// answered has no more.
	NextCursor string `json:"next_cursor"`
}

// timeForms is what the from and to parameters accept, for the errors.
const timeForms = `RFC 3339 ("2026-12-05T13:00:00Z"), a UTC date and time ("2026-12-05T13:00") or a UTC date ("2026-12-05")`

// parseRange reads the from and to parameters: created_at ≥ from and
// < to. A date alone as to means the end of that day, so from=to=a day
// lists that day. Errors name the parameter and the accepted forms.
func parseRange(fromS, toS string) (from, to time.Time, err error) {
	parse := func(name, s string, end bool) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
		for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t, nil
			}
		}
		if t, err := time.Parse(time.DateOnly, s); err == nil {
			if end {
				t = t.AddDate(0, 0, 1)
			}
			return t, nil
		}
		return time.Time{}, fmt.Errorf("%s: %q is not a time; write %s", name, s, timeForms)
	}
	if from, err = parse("from", fromS, false); err != nil {
		return
	}
	if to, err = parse("to", toS, true); err != nil {
		return
	}
	if !from.IsZero() && !to.IsZero() && !to.After(from) {
		return from, to, fmt.Errorf("to: %q is not after from %q", toS, fromS)
	}
	return from, to, nil
}

// rangeValue formats a bound for a URL and the page's datetime-local input
// (UTC, seconds only when it has some).
func rangeValue(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	if t.Nanosecond() != 0 {
		return t.Format(time.RFC3339Nano)
	}
	if t.Second() != 0 {
		return t.Format("2006-01-02T15:04:05")
	}
	return t.Format("2006-01-02T15:04")
}

// queryFrom reads a JobQuery from URL values (state, kind, queue, tenant,
// from, to, database, limit, cursor).
func queryFrom(v url.Values) (JobQuery, error) {
	q := JobQuery{
		Database: v.Get("database"),
		State:    pgjobs.State(v.Get("state")),
		Kind:     v.Get("kind"),
		Queue:    v.Get("queue"),
		Tenant:   v.Get("tenant"),
		Cursor:   v.Get("cursor"),
	}
	var err error
	if q.From, q.To, err = parseRange(v.Get("from"), v.Get("to")); err != nil {
		return q, err
	}
	switch q.State {
	case "", pgjobs.StateAvailable, pgjobs.StateRunning, pgjobs.StateCompleted, pgjobs.StateFailed:
	default:
		return q, fmt.Errorf("state: %q is not available, running, completed or failed", q.State)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > pgjobs.MaxListLimit {
			return q, fmt.Errorf("limit: want 1..%d, got %q", pgjobs.MaxListLimit, s)
		}
		q.Limit = n
	}
	return q, nil
}

// values is q as URL values, without the cursor.
func (q JobQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"database": q.Database, "state": string(q.State), "kind": q.Kind, "queue": q.Queue, "tenant": q.Tenant,
		"from": rangeValue(q.From), "to": rangeValue(q.To)} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// The cursor holds each database's keyset position: "name:id" entries
// joined by ",", id being the lowest id already shown, "-" a database with
// nothing more. A database not named starts from its newest job.
const cursorDone = "-"

func parseCursor(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, e := range strings.Split(s, ",") {
		name, pos, ok := strings.Cut(e, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("cursor: bad entry %q", e)
		}
		if pos != cursorDone {
			if n, err := strconv.ParseInt(pos, 10, 64); err != nil || n < 1 {
				return nil, fmt.Errorf("cursor: bad position %q", e)
			}
		}
		out[name] = pos
	}
	return out, nil
}

// jobs lists one page: every database is asked for a page of its own at
// its own keyset position, at once; the pages are merged newest first, and
// each database's next position is the last of its jobs that made the cut,
// so no job is skipped or shown twice across pages.
func (c *Console) jobs(ctx context.Context, q JobQuery) (JobPage, error) {
	cur, err := parseCursor(q.Cursor)
	if err != nil {
		return JobPage{}, err
	}
	var dbs []Database
	for _, db := range c.cfg.Databases {
		if (q.Database == "" || q.Database == db.Name()) && cur[db.Name()] != cursorDone {
			dbs = append(dbs, db)
		}
	}
	if q.Database != "" && c.dbs[q.Database] == nil {
		return JobPage{}, fmt.Errorf("database: no database %q", q.Database)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = pgjobs.DefaultListLimit
	}
	parts := fanOut(ctx, dbs, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) ([]pgjobs.JobInfo, error) {
		var before int64
		if p := cur[db.Name()]; p != "" {
			before, _ = strconv.ParseInt(p, 10, 64)
		}
		return db.List(ctx, pgjobs.ListFilter{
			State: q.State, Kind: q.Kind, Queue: q.Queue, Tenant: q.Tenant,
			CreatedFrom: q.From, CreatedTo: q.To,
			Before: jobs.JobID(before), Limit: limit,
		})
	})
	page := JobPage{Jobs: []pgjobs.JobInfo{}}
	page.Databases, page.Partial = statuses(parts)
	// k-way merge of the databases' pages (each highest id first).
	heads := make([]int, len(parts))
	for len(page.Jobs) < limit {
		best := -1
		for i, p := range parts {
			if p.err != nil || heads[i] >= len(p.val) {
				continue
			}
			if best < 0 || newer(p.val[heads[i]], parts[best].val[heads[best]]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		page.Jobs = append(page.Jobs, parts[best].val[heads[best]])
		heads[best]++
	}
	next := make([]string, 0, len(c.cfg.Databases))
	more := false
	for name, pos := range cur {
		if pos == cursorDone && c.dbs[name] != nil {
			next = append(next, name+":"+cursorDone)
		}
	}
	for i, p := range parts {
		name := p.db.Name()
		switch {
		case p.err != nil:
			// Not answered: keep its position, so the next page tries again.
			if pos := cur[name]; pos != "" {
				next = append(next, name+":"+pos)
			}
		case heads[i] == len(p.val) && len(p.val) < limit:
			next = append(next, name+":"+cursorDone)
		case heads[i] > 0:
			next = append(next, fmt.Sprintf("%s:%d", name, p.val[heads[i]-1].ID))
			more = true
		default:
			if pos := cur[name]; pos != "" {
				next = append(next, name+":"+pos)
			}
			more = true
		}
	}
	if more {
		page.NextCursor = strings.Join(next, ",")
	}
	return page, nil
}

// newer orders jobs newest first: creation time, then database, then id.
func newer(a, b pgjobs.JobInfo) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	if a.Database != b.Database {
		return a.Database < b.Database
	}
	return a.ID > b.ID
}

// DatabaseQueues is one database's queues.
type DatabaseQueues struct {
	DatabaseStatus
	// Queues are its queues by name; empty when it did not answer.
	Queues []pgjobs.QueueDepth `json:"queues"`
	// CountedAt is when the count they come from started: the counts are
	// cached, up to CountsMaxAge (zero when the database did not answer).
	CountedAt time.Time `json:"counted_at,omitzero"`
	// Pausable: its jobs backend can pause queues (jobs.QueuePauser).
	Pausable bool `json:"pausable"`
}

// QueuesReport is the queues of every database.
type QueuesReport struct {
	// Databases in the cell's order (control first).
	Databases []DatabaseQueues `json:"databases"`
	// Partial is true when a database did not answer.
	Partial bool `json:"partial"`
	// CountAge is the age of the oldest count in the report (below
	// CountsMaxAge).
	CountAge time.Duration `json:"count_age_ns"`
}

// queues reads every database's queue counts from the count cache and
// marks the paused queues (read fresh, never cached); a queue paused in a
// database but without jobs there is listed too. A queue's oldest ready
// age is advanced from the count's time to now, as if that job still
// waited.
func (c *Console) queues(ctx context.Context) QueuesReport {
	paused := c.pausedAll(ctx)
	type counted struct {
		depths []pgjobs.QueueDepth
		at     time.Time
	}
	parts := fanOut(ctx, c.cfg.Databases, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) (counted, error) {
		d, at, err := c.counts.get(ctx, db)
		return counted{d, at}, err
	})
	now := c.cfg.Now()
	st, partial := statuses(parts)
	rep := QueuesReport{Partial: partial, Databases: make([]DatabaseQueues, len(parts))}
	for i, p := range parts {
		dq := DatabaseQueues{DatabaseStatus: st[i], Queues: make([]pgjobs.QueueDepth, len(p.val.depths))}
		if p.err == nil {
			dq.CountedAt = p.val.at
			rep.CountAge = max(rep.CountAge, now.Sub(p.val.at))
		}
		// A copy: the cache's slice is shared by every reader.
		copy(dq.Queues, p.val.depths)
		for k := range dq.Queues {
			if dq.Queues[k].OldestReadyAge > 0 {
				dq.Queues[k].OldestReadyAge += max(now.Sub(p.val.at), 0)
			}
		}
		rep.Databases[i] = dq
	}
	c.markPaused(&rep, <-paused)
	return rep
}
