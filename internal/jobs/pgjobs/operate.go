package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/jobs"
)

// The errors of the operator calls (Job, RetryJob, CancelJob, DeleteJob,
// Depths).
var (
	// ErrNotReady: the database's jobs table is not migrated yet.
	ErrNotReady = errors.New("pgjobs: the jobs table of this database is not ready")
	// ErrJobNotFound: no job has that id in the database.
	ErrJobNotFound = errors.New("pgjobs: no such job")
	// ErrJobState: the job's state does not allow the action (a running job
	// is never touched: its worker owns it).
	ErrJobState = errors.New("pgjobs: the job's state does not allow this action")
)

// Job returns one job of this backend's database.
func (b *DB) Job(ctx context.Context, id jobs.JobID) (JobInfo, error) {
	if !b.Ready() {
		return JobInfo{}, ErrNotReady
	}
	j, err := b.scanJob(b.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM cellgate_jobs WHERE id = $1`, pgx.QueryExecModeExec, int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return JobInfo{}, ErrJobNotFound
	}
	if err != nil {
		return JobInfo{}, fmt.Errorf("pgjobs: job %d of %s: %w", id, b.name, err)
	}
	return j, nil
}

// RetryJob makes a completed, failed or waiting job available now, with
// one more attempt if its budget is spent. A job whose uniqueness key is
// held by another active job cannot come back (ErrJobState).
func (b *DB) RetryJob(ctx context.Context, id jobs.JobID) error {
	return b.operateOne(ctx, ActRetry, id)
}

// CancelJob fails a waiting job for good, recording "cancelled by an
// operator" as its last error. A running job cannot be cancelled.
func (b *DB) CancelJob(ctx context.Context, id jobs.JobID) error {
	return b.operateOne(ctx, ActCancel, id)
}

// DeleteJob removes a job that is not running.
func (b *DB) DeleteJob(ctx context.Context, id jobs.JobID) error {
	return b.operateOne(ctx, ActDelete, id)
}

// Act is an operator action on jobs.
type Act string

// The actions of Operate.
const (
	ActRetry  Act = "retry"
	ActCancel Act = "cancel"
	ActDelete Act = "delete"
)

var actSQL = map[Act]string{ActRetry: sqlRetryJobs, ActCancel: sqlCancelJobs, ActDelete: sqlDeleteJobs}

// Operate applies act to the jobs ids in one statement and returns how
// many it changed; jobs whose state does not allow it are left alone. A
// batch retry that collides on a uniqueness key falls back to one job at a
// time, so the other jobs still come back.
func (b *DB) Operate(ctx context.Context, act Act, ids []jobs.JobID) (int, error) {
	if !b.Ready() {
		return 0, ErrNotReady
	}
	sql, ok := actSQL[act]
	if !ok {
		return 0, fmt.Errorf("pgjobs: unknown action %q", act)
	}
	raw := make([]int64, len(ids))
	for i, id := range ids {
		raw[i] = int64(id)
	}
	tag, err := b.pool.Exec(ctx, sql, pgx.QueryExecModeExec, raw, b.now())
	if isUniqueViolation(err) && len(raw) > 1 {
		n := 0
		for _, id := range raw {
			tag, err := b.pool.Exec(ctx, sql, pgx.QueryExecModeExec, []int64{id}, b.now())
			if err != nil && !isUniqueViolation(err) {
				return n, fmt.Errorf("pgjobs: %s jobs of %s: %w", act, b.name, err)
			}
			n += int(tag.RowsAffected())
		}
		b.wakeAfter(act, n)
		return n, nil
	}
	if isUniqueViolation(err) {
		return 0, fmt.Errorf("%w: another active job holds its uniqueness key", ErrJobState)
	}
	if err != nil {
		return 0, fmt.Errorf("pgjobs: %s jobs of %s: %w", act, b.name, err)
	}
	n := int(tag.RowsAffected())
	b.wakeAfter(act, n)
	return n, nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// wakeAfter tells this process's fetcher that retried jobs are ready.
func (b *DB) wakeAfter(act Act, n int) {
	if act == ActRetry && n > 0 {
		signal(b.wake)
	}
}

func (b *DB) operateOne(ctx context.Context, act Act, id jobs.JobID) error {
	n, err := b.Operate(ctx, act, []jobs.JobID{id})
	if err != nil || n == 1 {
		return err
	}
	// Nothing changed: tell a missing job from one in the wrong state.
	var exists bool
	if err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cellgate_jobs WHERE id = $1)`, pgx.QueryExecModeExec, int64(id)).Scan(&exists); err != nil {
		return fmt.Errorf("pgjobs: %s job %d of %s: %w", act, id, b.name, err)
	}
	if !exists {
		return ErrJobNotFound
	}
	return ErrJobState
}

// vtime NULL and held false: the job is placed in the fair order again (or
// held, if its tenant holds its places) when a fair claim first sees it
// due, as after a backoff.
const sqlRetryJobs = `
UPDATE cellgate_jobs
SET state = 'available', run_at = $2, finished_at = NULL, vtime = NULL, held = false,
    max_attempts = greatest(max_attempts, attempt + 1)
WHERE id = ANY ($1::bigint[]) AND state IN ('available', 'completed', 'failed')`

const sqlCancelJobs = `
UPDATE cellgate_jobs
SET state = 'failed', finished_at = $2, vtime = NULL, held = false,
    errors = errors || jsonb_build_object('attempt', attempt, 'at', $2::timestamptz, 'error', 'cancelled by an operator')
WHERE id = ANY ($1::bigint[]) AND state = 'available'`

const sqlDeleteJobs = `DELETE FROM cellgate_jobs WHERE id = ANY ($1::bigint[]) AND state <> 'running' AND $2::timestamptz IS NOT NULL`

// QueueDepth is one queue of one database as an operator sees it.
type QueueDepth struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	// Available counts waiting jobs (ready now or scheduled); Ready those
	// of them due now.
	Available int64 `json:"available"`
	Ready     int64 `json:"ready"`
	// Running, Completed and Failed count the jobs in those states
	// (finished jobs are kept for the retention period).
	Running   int64 `json:"running"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// OldestReadyAge is how long the oldest ready job has been due (0
	// without one).
	OldestReadyAge time.Duration `json:"oldest_ready_age_ns"`
	// Paused is whether the queue is paused (PauseQueue). Depths counts
	// jobs only and leaves it false; a reader that wants it (the console)
	// sets it from PausedQueues, which is cheap to read fresh while the
	// counts may come from a cache.
	Paused bool `json:"paused"`
}

// Depths counts the jobs of every queue by state. It reads the whole
// table's finished jobs too, so its cost follows the retention window.
func (b *DB) Depths(ctx context.Context) ([]QueueDepth, error) {
	if !b.Ready() {
		return nil, ErrNotReady
	}
	now := b.now()
	rows, err := b.pool.Query(ctx, sqlDepths, pgx.QueryExecModeExec, now)
	if err != nil {
		return nil, fmt.Errorf("pgjobs: queue depths of %s: %w", b.name, err)
	}
	defer rows.Close()
	var out []QueueDepth
	for rows.Next() {
		var d QueueDepth
		var oldest *time.Time
		if err := rows.Scan(&d.Queue, &d.Available, &d.Ready, &d.Running, &d.Completed, &d.Failed, &oldest); err != nil {
			return nil, fmt.Errorf("pgjobs: queue depths of %s: %w", b.name, err)
		}
		if oldest != nil {
			d.OldestReadyAge = max(now.Sub(*oldest), 0)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgjobs: queue depths of %s: %w", b.name, err)
	}
	return out, nil
}

const sqlDepths = `
SELECT queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'available' AND run_at <= $1),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       min(run_at) FILTER (WHERE state = 'available' AND run_at <= $1)
FROM cellgate_jobs
GROUP BY queue
ORDER BY queue`

// TenantBacklog is one tenant's jobs in one database.
type TenantBacklog struct {
	// Tenant is the tenant id.
	Tenant string `json:"tenant"`
	// Available counts its waiting jobs, Ready those due now, Running
	// and Completed those states (completed within the retention window).
	Available int64 `json:"available"`
	Ready     int64 `json:"ready"`
	Running   int64 `json:"running"`
	Completed int64 `json:"completed"`
	// OldestReadyAge is how long its oldest ready job has been due.
	OldestReadyAge time.Duration `json:"oldest_ready_age_ns"`
}

// JobTotals are a database's totals the tenants' shares are measured
// against.
type JobTotals struct {
	// Completed counts the completed jobs (within the retention window).
	Completed int64 `json:"completed"`
	// Tenants counts the tenants with any job in the table.
	Tenants int64 `json:"tenants"`
}

// Backlogs returns the jobs of the given tenants by state, and the
// database's totals. The totals read the whole table.
func (b *DB) Backlogs(ctx context.Context, tenants []string) ([]TenantBacklog, JobTotals, error) {
	if !b.Ready() {
		return nil, JobTotals{}, ErrNotReady
	}
	var tot JobTotals
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'), count(DISTINCT tenant) FILTER (WHERE tenant <> '') FROM cellgate_jobs`,
		pgx.QueryExecModeExec).Scan(&tot.Completed, &tot.Tenants); err != nil {
		return nil, tot, fmt.Errorf("pgjobs: job totals of %s: %w", b.name, err)
	}
	out, err := b.TenantBacklogs(ctx, tenants)
	return out, tot, err
}

// TenantBacklogs returns the jobs of the given tenants by state, reading
// only their rows (no totals): what a periodic sampler can afford.
func (b *DB) TenantBacklogs(ctx context.Context, tenants []string) ([]TenantBacklog, error) {
	if !b.Ready() {
		return nil, ErrNotReady
	}
	now := b.now()
	rows, err := b.pool.Query(ctx, `
SELECT tenant,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'available' AND run_at <= $2),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       min(run_at) FILTER (WHERE state = 'available' AND run_at <= $2)
FROM cellgate_jobs WHERE tenant = ANY ($1::text[]) GROUP BY tenant`, pgx.QueryExecModeExec, tenants, now)
	if err != nil {
		return nil, fmt.Errorf("pgjobs: tenant backlogs of %s: %w", b.name, err)
	}
	defer rows.Close()
	var out []TenantBacklog
	for rows.Next() {
		var t TenantBacklog
		var oldest *time.Time
		if err := rows.Scan(&t.Tenant, &t.Available, &t.Ready, &t.Running, &t.Completed, &oldest); err != nil {
			return nil, fmt.Errorf("pgjobs: tenant backlogs of %s: %w", b.name, err)
		}
		if oldest != nil {
			t.OldestReadyAge = max(now.Sub(*oldest), 0)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgjobs: tenant backlogs of %s: %w", b.name, err)
	}
	return out, nil
}
