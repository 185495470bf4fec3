package pgjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
)

// State is a job's state in the table.
type State string

// The states of a job.
const (
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
)

// DefaultListLimit and MaxListLimit bound a List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListFilter selects jobs for List; zero fields match everything.
type ListFilter struct {
	// Database keeps the jobs of one database ("control" or a shard name).
	Database string
	// State keeps jobs in this state.
	State State
	// Kind keeps jobs of this kind.
	Kind string
	// Queue keeps jobs of this queue.
	Queue string
	// Tenant keeps jobs of this tenant.
	Tenant string
	// CreatedFrom and CreatedTo keep jobs created at or after CreatedFrom
	// and before CreatedTo; a zero time is no bound.
	CreatedFrom, CreatedTo time.Time
	// Before keeps jobs with ids below it (keyset pagination within one
	// database: pass the last id of the previous page); 0 means no bound.
	Before jobs.JobID
	// Limit caps the jobs returned (per call, across databases).
	// 0 means DefaultListLimit; at most MaxListLimit.
	Limit int
}

// AttemptError is one failed attempt of a job.
type AttemptError struct {
	// Attempt is the attempt's number.
	Attempt int `json:"attempt"`
	// At is when it failed.
	At time.Time `json:"at"`
	// Error is the handler's error text (truncated).
	Error string `json:"error"`
}

// JobInfo is a job as List shows it to an operator.
type JobInfo struct {
	// Database is where the job lives ("control" or a shard name).
	Database string `json:"database"`
	// ID is the job's id, unique within its database.
	ID jobs.JobID `json:"id"`
	// Kind, Queue and Tenant are as enqueued ("" tenant: none).
	Kind   string `json:"kind"`
	Queue  string `json:"queue"`
	Tenant string `json:"tenant"`
	// State is the job's state.
	State State `json:"state"`
	// Attempt is the number of attempts started; MaxAttempts the budget.
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// RunAt is when the job may run (next run, for a waiting job).
	RunAt time.Time `json:"run_at"`
	// CreatedAt is when it was enqueued.
	CreatedAt time.Time `json:"created_at"`
	// AttemptedAt is when the latest attempt started, if any.
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	// FinishedAt is when it completed or failed for good, if it did.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// UniqueKey is the uniqueness key, "" for none.
	UniqueKey string `json:"unique_key,omitempty"`
	// Args is the JSON encoding of the arguments.
	Args json.RawMessage `json:"args"`
	// Errors lists the failed attempts, oldest first.
	Errors []AttemptError `json:"errors"`
}

func (f ListFilter) limit() int {
	switch {
	case f.Limit <= 0:
		return DefaultListLimit
	case f.Limit > MaxListLimit:
		return MaxListLimit
	default:
		return f.Limit
	}
}

// List returns the jobs of this backend's database that match f, newest
// first. f.Database, if set, must be this backend's name.
func (b *DB) List(ctx context.Context, f ListFilter) ([]JobInfo, error) {
	if f.Database != "" && f.Database != b.name {
		return nil, nil
	}
	if !b.Ready() {
		return nil, nil
	}
	sql := sqlList
	if f.Tenant != "" {
		sql = sqlListTenant
	}
	rows, err := b.pool.Query(ctx, sql, pgx.QueryExecModeExec, string(f.State), f.Kind, f.Queue, f.Tenant, f.limit(), int64(f.Before),
		timeBound(f.CreatedFrom), timeBound(f.CreatedTo))
	if err != nil {
		return nil, fmt.Errorf("pgjobs: list jobs of %s: %w", b.name, err)
	}
	defer rows.Close()
	var out []JobInfo
	for rows.Next() {
		j, err := b.scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("pgjobs: list jobs of %s: %w", b.name, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgjobs: list jobs of %s: %w", b.name, err)
	}
	return out, nil
}

// timeBound is t as a query parameter: NULL (no bound) when zero.
func timeBound(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// scanJob reads one row of jobColumns.
func (b *DB) scanJob(row pgx.Row) (JobInfo, error) {
	j := JobInfo{Database: b.name}
	var id int64
	var attempt, maxAttempts int32
	var state string
	var uk *string
	var errs []byte
	if err := row.Scan(&id, &j.Kind, &j.Queue, &j.Tenant, &state, &attempt, &maxAttempts, &j.RunAt,
		&j.CreatedAt, &j.AttemptedAt, &j.FinishedAt, &uk, &j.Args, &errs); err != nil {
		return JobInfo{}, err
	}
	j.ID, j.State, j.Attempt, j.MaxAttempts = jobs.JobID(id), State(state), int(attempt), int(maxAttempts)
	if uk != nil {
		j.UniqueKey = *uk
	}
	if err := json.Unmarshal(errs, &j.Errors); err != nil {
		return JobInfo{}, fmt.Errorf("job %d: errors column: %w", id, err)
	}
	return j, nil
}

// jobColumns are the columns scanJob reads, in its order.
const jobColumns = `id, kind, queue, tenant, state, attempt, max_attempts, run_at, created_at,
       attempted_at, finished_at, unique_key, args, errors`

// sqlList walks the primary key backwards from $6 (keyset pagination), so
// a page costs its rows plus the ones the filters skip, never an offset.
// Failed jobs come from cellgate_jobs_failed_idx (state = 'failed' implies
// its predicate once the state is bound). The attempt > 0 term, always
// true of a running job, lets a list of running jobs read the few of them
// from cellgate_jobs_running_idx. A filter on kind or queue alone still
// walks the key past the jobs it skips (docs/console.md, "Performance").
// List uses sqlListTenant when a tenant is given ($4 is "" here).
//
// The statement is planned with its parameters bound (pgx's exec mode: an
// unnamed statement gets a custom plan), so a term like ($1 = ” OR …)
// folds to one side before planning.
const sqlList = `
SELECT ` + jobColumns + `
FROM cellgate_jobs
WHERE ($1 = '' OR state = $1)
  AND ($1 <> 'running' OR attempt > 0)
  AND ($4 = '' OR tenant = $4)` + listPage

// listPage ends every list statement and each branch of sqlListTenant:
// the filters on kind, queue and creation time, the keyset cursor ($6),
// newest first, one page ($5).
const listPage = `
  AND ($2 = '' OR kind = $2)
  AND ($3 = '' OR queue = $3)
  AND ($6 = 0 OR id < $6)
  AND ($7::timestamptz IS NULL OR created_at >= $7)
  AND ($8::timestamptz IS NULL OR created_at < $8)
ORDER BY id DESC
LIMIT $5`

// sqlListTenant is one tenant's jobs, newest first, from the three indexes
// that hold a tenant's jobs between them, each read newest first up to the
// page's size, then merged:
//
//   - finished jobs and waiting ones not placed in the fair order:
//     cellgate_jobs_tenant_list_idx (tenant, id), read in id order;
//   - placed waiting jobs: cellgate_jobs_tenant_vtime_idx (tenant, vtime),
//     every one of them, sorted by id (the cost follows the tenant's ready
//     backlog);
//   - running jobs: cellgate_jobs_running_idx, every running job of the
//     database, kept when the tenant's (few: one per busy worker).
//
// Each branch starts with a term on the state parameter alone: with a
// state filter, a branch that cannot hold such jobs folds to a constant
// false and reads nothing. PostgreSQL does not see on its own that, say,
// state = 'running' contradicts the first branch's state IN (…) OR …, and
// would scan the tenant's finished jobs for nothing.
const sqlListTenant = `
SELECT ` + jobColumns + ` FROM (
  (SELECT ` + jobColumns + ` FROM cellgate_jobs
   WHERE $1 IN ('', 'completed', 'failed', 'available')
     AND tenant = $4
     AND (state IN ('completed', 'failed') OR (state = 'available' AND vtime IS NULL))
     AND ($1 = '' OR state = $1)` + listPage + `)
  UNION ALL
  (SELECT ` + jobColumns + ` FROM cellgate_jobs
   WHERE $1 IN ('', 'available')
     AND tenant = $4
     AND state = 'available' AND vtime IS NOT NULL` + listPage + `)
  UNION ALL
  (SELECT ` + jobColumns + ` FROM cellgate_jobs
   WHERE $1 IN ('', 'running')
     AND state = 'running' AND attempt > 0
     AND tenant = $4` + listPage + `)
) j
ORDER BY id DESC
LIMIT $5`
