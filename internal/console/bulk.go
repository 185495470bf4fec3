package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// The bounds of bulk actions.
const (
	// bulkBatch is the jobs read and changed per statement.
	bulkBatch = 500
	// bulkKept is how many bulk actions (running or finished) are kept for
	// their progress; the oldest finished one makes room.
	bulkKept = 32
	// bulkTimeout caps one bulk action.
	bulkTimeout = 10 * time.Minute
)

// BulkStatus is a bulk action's progress.
type BulkStatus struct {
	// ID names it in /admin/api/bulk/{id}.
	ID string `json:"id"`
	// Action, Filter, Role and Actor are what was asked, by whom (Actor as
	// in the audit lines: the token or the session).
	Action pgjobs.Act `json:"action"`
	Filter BulkFilter `json:"filter"`
	Role   string     `json:"role"`
	Actor  string     `json:"actor"`
	// Started and Finished (nil while running) time it.
	Started  time.Time  `json:"started"`
	Finished *time.Time `json:"finished,omitempty"`
	// Matched counts the jobs the filter found so far; Changed those the
	// action changed (a job whose state does not allow it is left alone).
	Matched int `json:"matched"`
	Changed int `json:"changed"`
	// Databases names every database and the error that stopped its part.
	Databases []DatabaseStatus `json:"databases"`

	who who // for the closing audit line
}

// BulkFilter is the filter of a bulk action.
type BulkFilter struct {
	Database string       `json:"database,omitempty"`
	State    pgjobs.State `json:"state,omitempty"`
	Kind     string       `json:"kind,omitempty"`
	Queue    string       `json:"queue,omitempty"`
	Tenant   string       `json:"tenant,omitempty"`
	// From and To bound created_at as in JobQuery.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
}

func (f BulkFilter) String() string {
	return fmt.Sprintf("database=%q state=%q kind=%q queue=%q tenant=%q from=%q to=%q", f.Database, f.State, f.Kind, f.Queue, f.Tenant, rangeValue(f.From), rangeValue(f.To))
}

// bulkOps holds the recent bulk actions; its mutex guards every
// BulkStatus it holds.
type bulkOps struct {
	mu  sync.Mutex
	seq int
	ops []*BulkStatus
}

var errBulkFull = errors.New("too many bulk actions are running; wait for one to finish")

// start registers a bulk action, or refuses when bulkKept are running.
func (b *bulkOps) start(st *BulkStatus) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ops) == bulkKept {
		i := 0
		for i < len(b.ops) && b.ops[i].Finished == nil {
			i++
		}
		if i == len(b.ops) {
			return errBulkFull
		}
		b.ops = append(b.ops[:i], b.ops[i+1:]...)
	}
	b.seq++
	st.ID = strconv.Itoa(b.seq)
	b.ops = append(b.ops, st)
	return nil
}

// get returns a copy of one bulk action's status.
func (b *bulkOps) get(id string) (BulkStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, op := range b.ops {
		if op.ID == id {
			cp := *op
			cp.Databases = append([]DatabaseStatus(nil), op.Databases...)
			return cp, true
		}
	}
	return BulkStatus{}, false
}

// startBulk checks the request and runs the action in the background: each
// database at once, a page of matching ids at a time, each page changed in
// one statement. It returns the status to poll.
func (c *Console) startBulk(w who, act pgjobs.Act, f BulkFilter) (BulkStatus, error) {
	if _, ok := map[pgjobs.Act]bool{pgjobs.ActRetry: true, pgjobs.ActCancel: true, pgjobs.ActDelete: true}[act]; !ok {
		return BulkStatus{}, errUnknownAction
	}
	dbs, err := c.bulkDatabases(f)
	if err != nil {
		return BulkStatus{}, err
	}
	st := &BulkStatus{Action: act, Filter: f, Role: w.Role.String(), Actor: w.Actor(), Started: c.cfg.Now(), Databases: make([]DatabaseStatus, len(dbs)), who: w}
	for i, db := range dbs {
		st.Databases[i].Database = db.Name()
	}
	if err := c.bulk.start(st); err != nil {
		return BulkStatus{}, err
	}
	consoleauth.Audit(c.log, slog.LevelInfo, w, "bulk "+string(act), "started", "console", "cell", "bulk", st.ID, "filter", f.String(), "count", 0)
	go c.runBulk(st, dbs)
	s, _ := c.bulk.get(st.ID)
	return s, nil
}

// bulkAfter is the state a bulk action leaves the jobs it changed in (the
// audit line's "after"; its "before" is the filter's state).
var bulkAfter = map[pgjobs.Act]string{
	pgjobs.ActRetry:  string(pgjobs.StateAvailable),
	pgjobs.ActCancel: string(pgjobs.StateFailed),
	pgjobs.ActDelete: "absent",
}

func (c *Console) runBulk(st *BulkStatus, dbs []Database) {
	ctx, cancel := context.WithTimeout(context.Background(), bulkTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.bulkOne(ctx, st, db); err != nil {
				c.bulk.mu.Lock()
				st.Databases[i].Error = err.Error()
				c.bulk.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.bulk.mu.Lock()
	changed := st.Changed
	c.bulk.mu.Unlock()
	// Logged before it shows as finished: whoever sees it finished finds
	// its audit line written.
	before := string(st.Filter.State)
	if before == "" {
		before = "any"
	}
	consoleauth.Audit(c.log, slog.LevelInfo, st.who, "bulk "+string(st.Action), "finished", "console", "cell", "bulk", st.ID, "filter", st.Filter.String(), "count", changed,
		"before", before, "after", bulkAfter[st.Action])
	c.bulk.mu.Lock()
	now := c.cfg.Now()
	st.Finished = &now
	c.bulk.mu.Unlock()
}

// bulkOne walks one database's matching jobs by id, newest first: a
// changed job moves out of the filter or stays behind the keyset position,
// so no job is visited twice.
func (c *Console) bulkOne(ctx context.Context, st *BulkStatus, db Database) error {
	if !db.Ready() {
		return pgjobs.ErrNotReady
	}
	var before jobs.JobID
	for {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.DatabaseTimeout)
		page, err := db.List(pctx, pgjobs.ListFilter{State: st.Filter.State, Kind: st.Filter.Kind, Queue: st.Filter.Queue, Tenant: st.Filter.Tenant,
			CreatedFrom: st.Filter.From, CreatedTo: st.Filter.To, Before: before, Limit: bulkBatch})
		var n int
		if err == nil && len(page) > 0 {
			ids := make([]jobs.JobID, len(page))
			for i, j := range page {
				ids[i] = j.ID
			}
			n, err = db.Operate(pctx, st.Action, ids)
		}
		cancel()
		if err != nil {
			return err
		}
		c.bulk.mu.Lock()
		st.Matched += len(page)
		st.Changed += n
		c.bulk.mu.Unlock()
		if len(page) < bulkBatch {
			return nil
		}
		before = page[len(page)-1].ID
	}
}

// Real reports whether the filter selects by what a job is (state, kind,
// queue or tenant). A database or a time range alone is not a filter: it
// would touch every job of a database or of an epoch.
func (f BulkFilter) Real() bool {
	return f.State != "" || f.Kind != "" || f.Queue != "" || f.Tenant != ""
}

var errNoFilter = errors.New("filter: name at least one of state, kind, queue or tenant (database, from and to only narrow one)")

// bulkDatabases checks f and returns the databases it covers.
func (c *Console) bulkDatabases(f BulkFilter) ([]Database, error) {
	if !f.Real() {
		return nil, errNoFilter
	}
	if f.Database != "" && c.dbs[f.Database] == nil {
		return nil, fmt.Errorf("database: no database %q", f.Database)
	}
	var dbs []Database
	for _, db := range c.cfg.Databases {
		if f.Database == "" || f.Database == db.Name() {
			dbs = append(dbs, db)
		}
	}
	return dbs, nil
}

// confirmTTL is how long a bulk confirmation may be presented.
const confirmTTL = 5 * time.Minute

// BulkPreview is the first answer to a bulk action: how many jobs it would
// touch now, and the confirmation the second call presents to run it.
type BulkPreview struct {
	Action pgjobs.Act `json:"action"`
	Filter BulkFilter `json:"filter"`
	// Count is the jobs the filter matches now, in the databases that
	// answered (Partial: some did not; see Databases).
	Count     int              `json:"count"`
	Partial   bool             `json:"partial,omitempty"`
	Databases []DatabaseStatus `json:"databases"`
	// Confirm is the value of the "confirm" field of the second call (the
	// POST body), with the same action and filter, by the same
	// credential, before Expires.
	Confirm string    `json:"confirm"`
	Expires time.Time `json:"expires"`
}

// confirmation signs an action, a filter and a credential until exp.
func (c *Console) confirmation(w who, act pgjobs.Act, f BulkFilter, exp time.Time) string {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(exp.Unix()))
	m := hmac.New(sha256.New, c.confirmKey)
	m.Write(ts[:])
	fmt.Fprintf(m, "\x00%s\x00%s\x00%s", act, f.String(), w.Actor())
	return base64.RawURLEncoding.EncodeToString(append(ts[:], m.Sum(nil)...))
}

var errConfirm = errors.New("confirm: missing, expired or for another action, filter or credential; ask again without it for a fresh count and confirmation")

// checkConfirmation accepts a confirmation made for exactly this call.
func (c *Console) checkConfirmation(w who, act pgjobs.Act, f BulkFilter, got string) error {
	raw, err := base64.RawURLEncoding.DecodeString(got)
	if err != nil || len(raw) != 8+sha256.Size {
		return errConfirm
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	if !c.cfg.Now().Before(exp) || !hmac.Equal([]byte(got), []byte(c.confirmation(w, act, f, exp))) {
		return errConfirm
	}
	return nil
}

// previewBulk counts the jobs a bulk action would touch, walking each
// database's matching ids as the action would, and signs a confirmation.
func (c *Console) previewBulk(ctx context.Context, w who, act pgjobs.Act, f BulkFilter) (BulkPreview, error) {
	if _, ok := map[pgjobs.Act]bool{pgjobs.ActRetry: true, pgjobs.ActCancel: true, pgjobs.ActDelete: true}[act]; !ok {
		return BulkPreview{}, errUnknownAction
	}
	dbs, err := c.bulkDatabases(f)
	if err != nil {
		return BulkPreview{}, err
	}
	parts := fanOut(ctx, dbs, bulkTimeout, func(ctx context.Context, db Database) (int, error) {
		if !db.Ready() {
			return 0, pgjobs.ErrNotReady
		}
		n := 0
		var before jobs.JobID
		for {
			pctx, cancel := context.WithTimeout(ctx, c.cfg.DatabaseTimeout)
			page, err := db.List(pctx, pgjobs.ListFilter{State: f.State, Kind: f.Kind, Queue: f.Queue, Tenant: f.Tenant,
				CreatedFrom: f.From, CreatedTo: f.To, Before: before, Limit: bulkBatch})
			cancel()
			if err != nil {
				return n, err
			}
			n += len(page)
			if len(page) < bulkBatch {
				return n, nil
			}
			before = page[len(page)-1].ID
		}
	})
	st, partial := statuses(parts)
	p := BulkPreview{Action: act, Filter: f, Partial: partial, Databases: st, Expires: c.cfg.Now().Add(confirmTTL).Truncate(time.Second)}
	for _, part := range parts {
		if part.err == nil {
			p.Count += part.val
		}
	}
	p.Confirm = c.confirmation(w, act, f, p.Expires)
	return p, nil
}
