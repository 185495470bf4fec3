package pgjobs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/jobs"
)

// schedulePeriodic enqueues the periods of the periodic entries due now
// (only the maintenance leader calls it). One transaction takes the
// schedule's own advisory lock (so two processes that both believe they
// lead, one of them about to learn it lost its connection, never schedule
// at once), locks the entries' rows in cellgate_jobs_periodic, inserts the
// due jobs and moves each entry's last_period forward: a period is
// enqueued with its record or not at all, so the next leader starts from
// what was committed. It returns the clock time of the next period due and
// what it enqueued and skipped.
func (b *DB) schedulePeriodic() (next time.Time, enqueued, skipped int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	now := b.now()
	// Retried after a failure without waiting for the next period.
	next = now.Add(time.Second)
	names := make([]string, len(b.periodic))
	for i := range b.periodic {
		names[i] = b.periodic[i].Name
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return next, 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: %w", b.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var got bool
	if err := tx.QueryRow(ctx, sqlPeriodicTryLock, periodicLockClass).Scan(&got); err != nil {
		return next, 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: %w", b.name, err)
	}
	if !got {
		return next, 0, 0, nil
	}
	rows, err := tx.Query(ctx, sqlPeriodicLock, names)
	if err != nil {
		return next, 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: %w", b.name, err)
	}
	last := make(map[string]time.Time, len(names))
	for rows.Next() {
		var name string
		var at time.Time
		if err := rows.Scan(&name, &at); err != nil {
			rows.Close()
			return next, 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: %w", b.name, err)
		}
		last[name] = at
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return next, 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: %w", b.name, err)
	}

	grace := b.cfg.tick()
	var ins []jobs.InsertParams
	var owners []int // entry index of each ins element
	skips := make([]int, len(b.periodic))
	var updNames []string
	var updLast []time.Time
	next = time.Time{}
	for i := range b.periodic {
		p := &b.periodic[i]
		l, seen := last[p.Name]
		runs, sk, newLast := p.Due(l, !seen, now, grace)
		for _, at := range runs {
			ins = append(ins, p.Job(at))
			owners = append(owners, i)
		}
		skips[i] = sk
		if !seen || !newLast.Equal(l) {
			updNames = append(updNames, p.Name)
			updLast = append(updLast, newLast)
		}
		if n := p.Schedule.Next(newLast); next.IsZero() || n.Before(next) {
			next = n
		}
	}
	res, err := insertBatched(ctx, tx, ins, now)
	if err != nil {
		return now.Add(time.Second), 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: enqueue: %w", b.name, err)
	}
	if len(updNames) > 0 {
		if _, err := tx.Exec(ctx, sqlPeriodicSave, updNames, updLast, now); err != nil {
			return now.Add(time.Second), 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: record: %w", b.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return now.Add(time.Second), 0, 0, fmt.Errorf("pgjobs: periodic jobs on %s: commit: %w", b.name, err)
	}
	enq := make([]int, len(b.periodic))
	ready := false
	for k, r := range res {
		if !r.Duplicate {
			enq[owners[k]]++
			enqueued++
			ready = ready || !ins[k].RunAt.After(now)
		}
	}
	for i := range b.periodic {
		skipped += skips[i]
		if (enq[i] > 0 || skips[i] > 0) && b.scheduled != nil {
			b.scheduled(b.periodic[i].Name, enq[i], skips[i])
		}
		if skips[i] > 0 {
			b.log.Warn("pgjobs: periodic job missed periods while no process scheduled it",
				"entry", b.periodic[i].Name, "skipped", skips[i], "catch_up", b.periodic[i].CatchUp)
		}
	}
	if ready {
		b.notifyNow()
	}
	return next, enqueued, skipped, nil
}

// periodicLockClass is the first key of the schedule's transaction-level
// advisory lock; the second is the jobs table's oid, as for the
// maintenance lock.
const periodicLockClass = 1667723884

const sqlPeriodicTryLock = `SELECT pg_try_advisory_xact_lock($1, (` + sqlJobsTableOID + `::bigint & 2147483647)::int)`

const sqlPeriodicLock = `
SELECT name, last_period FROM cellgate_jobs_periodic
WHERE name = ANY ($1::text[])
ORDER BY name
FOR UPDATE`

const sqlPeriodicSave = `
INSERT INTO cellgate_jobs_periodic (name, last_period, updated_at)
SELECT n, l, $3 FROM unnest($1::text[], $2::timestamptz[]) AS u(n, l)
ON CONFLICT (name) DO UPDATE SET last_period = EXCLUDED.last_period, updated_at = EXCLUDED.updated_at`

// cancelChannel is the NOTIFY channel of running jobs' cancellations.
// A channel is the database's, shared by the jobs tables of all its
// schemas, whose ids are each table's own: the payload names the table by
// its oid as well as the job, "oid:id" (parseCancel), so that a process
// cancels a job of its own table only.
const cancelChannel = "cellgate_jobs_cancel"

// parseCancel reads a cancellation's payload: the job's id and whether
// the job is of the table whose oid is table. A bare id, as a process of
// an earlier version sends, names no table and is taken as this one's.
func parseCancel(payload string, table uint32) (jobs.JobID, bool) {
	oid, idText, qualified := strings.Cut(payload, ":")
	if !qualified {
		idText = oid
	} else if n, err := strconv.ParseUint(oid, 10, 32); err != nil || uint32(n) != table {
		return 0, false
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil {
		return 0, false
	}
	return jobs.JobID(id), true
}

// noteCancel passes the cancellation of job id to the Client if this
// process holds the job (running, or claimed ahead of its workers).
func (b *DB) noteCancel(id jobs.JobID) {
	b.mu.Lock()
	_, ok := b.running[id]
	b.mu.Unlock()
	if ok && b.cancelled != nil {
		b.cancelled(id)
	}
}

// sqlCancel fails a waiting job, or asks for a running one's cancellation
// (a row in cellgate_jobs_cancel_requests, which its process reads from the NOTIFY on
// cancelChannel or its next heartbeat); it returns whether it found a job
// in either state, and whether it was running.
const sqlCancel = `
WITH w AS (
    UPDATE cellgate_jobs
    SET state = 'failed', finished_at = $2, vtime = NULL, held = false,
        errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', $2::timestamptz, 'error', 'cancelled'))
    WHERE id = $1 AND state = 'available'
    RETURNING id),
r AS (
    SELECT id FROM cellgate_jobs WHERE id = $1 AND state = 'running'),
i AS (
    INSERT INTO cellgate_jobs_cancel_requests (job_id, requested_at)
    SELECT id, $2 FROM r
    ON CONFLICT (job_id) DO NOTHING)
SELECT EXISTS (SELECT FROM w) OR EXISTS (SELECT FROM r), EXISTS (SELECT FROM r)`

// sqlCancelNotify tells the process running job $1 of its cancellation,
// naming the job's table by its oid (the table the statement's search
// path finds, as every statement of the backend does). A statement of
// its own outside a transaction that writes (notify.go); in CancelTx it
// joins the caller's transaction, which is rare enough.
const sqlCancelNotify = `SELECT pg_notify('` + cancelChannel + `', ` + sqlJobsTableOID + `::text || ':' || $1::text)`

// sqlTableOID reads the oid the cancellations name the table by.
const sqlTableOID = `SELECT ` + sqlJobsTableOID

// cancelOn runs the cancellation of id with q (a pool or the caller's
// transaction).
func (b *DB) cancelOn(ctx context.Context, q execQuerier, id jobs.JobID, inTx bool) error {
	var found, running bool
	if err := q.QueryRow(ctx, sqlCancel, int64(id), b.now()).Scan(&found, &running); err != nil {
		return fmt.Errorf("pgjobs: cancel job %d of %s: %w", id, b.name, err)
	}
	if !found {
		return fmt.Errorf("%w: job %d of %s", jobs.ErrNotWaiting, id, b.name)
	}
	if running {
		if _, err := q.Exec(ctx, sqlCancelNotify, strconv.FormatInt(int64(id), 10)); err != nil {
			// The heartbeat still finds it (cellgate_jobs_cancel_requests).
			if inTx {
				return fmt.Errorf("pgjobs: cancel job %d of %s: notify: %w", id, b.name, err)
			}
			b.log.Warn("pgjobs: the NOTIFY of a cancelled running job failed; its process sees it at its next heartbeat", "id", id, "err", err)
		}
	}
	return nil
}

// execQuerier is what cancelOn needs of a pool or a transaction.
type execQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
