package pgjobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
)

var _ jobs.QueuePauser = (*DB)(nil)

// errNoQueue refuses an empty queue name: no job has one, so pausing it
// would hold nothing and only litter the table.
var errNoQueue = errors.New("pgjobs: the queue name is empty")

// PauseQueue pauses queue in this backend's database: from the claims that
// start after it commits, no process claiming from the database takes the
// queue's jobs. Jobs already claimed (running, or prefetched by a fetcher)
// finish. The pause is a row in cellgate_jobs_paused, so it holds across
// restarts until ResumeQueue. It reports whether the queue was running
// before; pausing a paused queue changes nothing. A queue with no jobs yet
// may be paused: its jobs wait from their first enqueue.
func (b *DB) PauseQueue(ctx context.Context, queue string) (bool, error) {
	if queue == "" {
		return false, errNoQueue
	}
	if !b.Ready() {
		return false, ErrNotReady
	}
	tag, err := b.pool.Exec(ctx, sqlPause, pgx.QueryExecModeExec, queue, b.now())
	if err != nil {
		return false, fmt.Errorf("pgjobs: pause queue %q on %s: %w", queue, b.name, err)
	}
	return tag.RowsAffected() == 1, nil
}

const sqlPause = `INSERT INTO cellgate_jobs_paused (queue, paused_at) VALUES ($1, $2) ON CONFLICT (queue) DO NOTHING`

// ResumeQueue resumes a paused queue and wakes every process listening on
// the database, so idle workers elsewhere claim its backlog at once rather
// than at their next poll. It reports whether the queue was paused.
func (b *DB) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	if queue == "" {
		return false, errNoQueue
	}
	if !b.Ready() {
		return false, ErrNotReady
	}
	// The NOTIFY rides in the DELETE's transaction: it is delivered only
	// if the resume commits, and after it, so a woken claim sees the queue
	// resumed. A notifying transaction holds a cluster-wide lock through
	// its commit (see notify.go); a resume is rare, so that costs nothing
	// worth a second round trip.
	var resumed bool
	err := b.pool.QueryRow(ctx, sqlResume, pgx.QueryExecModeExec, queue).Scan(&resumed)
	if err != nil {
		return false, fmt.Errorf("pgjobs: resume queue %q on %s: %w", queue, b.name, err)
	}
	if resumed && !b.isClosed() {
		// This process's fetcher needs no round trip.
		signal(b.wake)
	}
	return resumed, nil
}

// sqlResume deletes the row and, only when there was one, notifies, in one
// statement (one implicit transaction). CASE evaluates its branch only
// when the condition holds.
const sqlResume = `
WITH gone AS (DELETE FROM cellgate_jobs_paused WHERE queue = $1 RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT FROM gone) THEN (SELECT true FROM pg_notify('cellgate_jobs', '')) ELSE false END`

// PausedQueues lists the paused queues of this database, by name (in byte
// order).
func (b *DB) PausedQueues(ctx context.Context) ([]string, error) {
	if !b.Ready() {
		return nil, ErrNotReady
	}
	rows, err := b.pool.Query(ctx, `SELECT queue FROM cellgate_jobs_paused ORDER BY queue COLLATE "C"`, pgx.QueryExecModeExec)
	if err == nil {
		var out []string
		if out, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("pgjobs: paused queues of %s: %w", b.name, err)
}
