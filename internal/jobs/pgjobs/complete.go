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

// maxErrorLen caps the error text stored per failed attempt, so a handler
// that returns a huge error cannot bloat the row.
const maxErrorLen = 2000

// errNotRunning is returned when an outcome arrives for a job that is no
// longer running as this attempt (rescued, then claimed again).
var errNotRunning = errors.New("pgjobs: the job is no longer running as this attempt (rescued after its heartbeats stopped?); outcome dropped")

func (b *DB) own(row *jobs.JobRow) error {
	if row == nil || row.Handle != b {
		return errors.New("pgjobs: row was not claimed from this backend")
	}
	return nil
}

// untrack forgets a job whose outcome is about to be recorded; freed is
// dropLocked's. The caller passes it to roomFreed once the outcome is
// buffered or written.
func (b *DB) untrack(id jobs.JobID) (freed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropLocked(id)
}

// roomFreed wakes the fetcher when a recorded outcome left room under a
// cap: a kind's, or, freed, its tenant's. A worker may be idle, or a
// tenant passed over, because of the cap.
func (b *DB) roomFreed(row *jobs.JobRow, freed bool) {
	if freed || b.capped[row.Kind] {
		signal(b.wake)
	}
}

// complete records success. The write is buffered (see the package doc):
// it reaches the table with the next claim or within CompleteFlush, without
// waiting for the WAL flush, and confirmLoop makes it durable within
// CompleteConfirm, writing it again until that succeeds. Only a crash of
// this process in between leaves the job 'running' until it is rescued and
// run again. After Close it is written at once, durably.
func (b *DB) complete(ctx context.Context, row *jobs.JobRow) error {
	if err := b.own(row); err != nil {
		return err
	}
	freed := b.untrack(row.ID)
	b.cmu.Lock()
	if b.doneClosed {
		// Close has written the buffer for the last time.
		b.cmu.Unlock()
		return b.closedErr(b.writeDurably(ctx, []doneRec{{id: int64(row.ID), attempt: int32(row.Attempt)}}))
	}
	b.done = append(b.done, doneRec{id: int64(row.ID), attempt: int32(row.Attempt)})
	n := len(b.done)
	if n == 1 {
		b.doneSince = time.Now()
	}
	b.cmu.Unlock()
	switch {
	case n >= b.cfg.CompleteBatch:
		signal(b.flushFull)
	case n == 1:
		signal(b.flushKick)
	}
	// The next claim writes the buffer first, so it sees the room.
	b.roomFreed(row, freed)
	return nil
}

// closedErr marks the error of a write after Close (its pool may be closed
// too) as jobs.ErrClosed, which the Client does not report.
func (b *DB) closedErr(err error) error {
	if err != nil && b.isClosed() {
		return fmt.Errorf("%w: %w", jobs.ErrClosed, err)
	}
	return err
}

// retry records the failed attempt and makes the job available at
// now+delay.
func (b *DB) retry(ctx context.Context, row *jobs.JobRow, delay time.Duration, errMsg string) error {
	if err := b.own(row); err != nil {
		return err
	}
	freed := b.untrack(row.ID)
	now := b.now()
	runAt := now.Add(max(delay, 0))
	tag, err := b.writeOutcome(ctx, sqlRetry, pgx.QueryExecModeExec, int64(row.ID), int32(row.Attempt), runAt, now, truncate(errMsg))
	if err != nil {
		return b.closedErr(fmt.Errorf("pgjobs: retry job %d: %w", row.ID, err))
	}
	return b.madeAvailable(tag, row, freed, delay, runAt)
}

// madeAvailable finishes a retry or snooze whose write tag reports: a job
// no longer running is errNotRunning; otherwise idle workers learn of it
// now (delay ≤ 0) or at runAt, and jobs held back by a cap get another
// look, since this job's running slot is free (freed is untrack's).
func (b *DB) madeAvailable(tag pgconn.CommandTag, row *jobs.JobRow, freed bool, delay time.Duration, runAt time.Time) error {
	// Written, or rescued meanwhile: either way the job no longer runs.
	b.roomFreed(row, freed)
	if tag.RowsAffected() == 0 {
		return errNotRunning
	}
	if delay <= 0 {
		b.notifyNow()
	} else {
		b.wakeAt(runAt)
	}
	return nil
}

// snooze makes the job available at now+delay with its attempt taken back,
// so the next claim runs it as the same attempt; no error is recorded.
func (b *DB) snooze(ctx context.Context, row *jobs.JobRow, delay time.Duration) error {
	if err := b.own(row); err != nil {
		return err
	}
	freed := b.untrack(row.ID)
	now := b.now()
	runAt := now.Add(max(delay, 0))
	tag, err := b.writeOutcome(ctx, sqlSnooze, pgx.QueryExecModeExec, int64(row.ID), int32(row.Attempt), runAt, now)
	if err != nil {
		return b.closedErr(fmt.Errorf("pgjobs: snooze job %d: %w", row.ID, err))
	}
	return b.madeAvailable(tag, row, freed, delay, runAt)
}

// fail records the final failure; the job stays in the table, 'failed',
// for the retention period.
func (b *DB) fail(ctx context.Context, row *jobs.JobRow, errMsg string) error {
	if err := b.own(row); err != nil {
		return err
	}
	freed := b.untrack(row.ID)
	tag, err := b.writeOutcome(ctx, sqlFail, pgx.QueryExecModeExec, int64(row.ID), int32(row.Attempt), b.now(), truncate(errMsg))
	if err != nil {
		return b.closedErr(fmt.Errorf("pgjobs: fail job %d: %w", row.ID, err))
	}
	b.roomFreed(row, freed)
	if tag.RowsAffected() == 0 {
		return errNotRunning
	}
	return nil
}

// writeOutcome runs a retry's or a failure's UPDATE, and again after every
// error that says the database could not be reached (see unreachable),
// with backoff (50 ms doubling to 1 s, logged at most every 30 s), until
// the database answers or the backend closes: otherwise the job would sit
// 'running' until it is rescued. The job's worker waits meanwhile; it
// could not claim from a database that is down anyway.
func (b *DB) writeOutcome(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	retry := newBackoff(50*time.Millisecond, jobRetryLimit)
	for {
		wctx, cancel := context.WithTimeout(ctx, dbTimeout)
		tag, err := b.pool.Exec(wctx, sql, args...)
		cancel()
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return tag, err
		}
		b.logErr("outcome", "pgjobs: recording a job's outcome failed; retrying", err)
		if !retry.wait(b.quit) {
			return tag, err
		}
	}
}

// unreachable reports whether err says the database could not be reached
// or went away mid-statement (a connection error, a shutdown or crash of
// the server, too many connections) rather than that it refused the
// statement, which trying again would not change.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "57", "53": // connection exception, operator intervention, insufficient resources
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled)
}

func truncate(s string) string {
	if len(s) <= maxErrorLen {
		return s
	}
	// Cut on a rune boundary so the text stays valid UTF-8 for jsonb.
	i := maxErrorLen
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

// sqlRetry and sqlSnooze fail a job whose cancellation was asked while it
// ran (cellgate_jobs_cancel_requests), whatever its worker returned.
const sqlRetry = `
UPDATE cellgate_jobs
SET state = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN $4::timestamptz END,
    run_at = $3, vtime = NULL,
    errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', $4::timestamptz, 'error', $5::text))
WHERE id = $1 AND attempt = $2 AND state = 'running'`

const sqlSnooze = `
UPDATE cellgate_jobs
SET state = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN $4::timestamptz END,
    run_at = $3, vtime = NULL,
    attempt = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN attempt ELSE attempt - 1 END,
    errors = CASE WHEN EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id)
             THEN errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', $4::timestamptz, 'error', 'cancelled'))
             ELSE errors END
WHERE id = $1 AND attempt = $2 AND state = 'running'`

const sqlFail = `
UPDATE cellgate_jobs
SET state = 'failed', finished_at = $3,
    errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', $3::timestamptz, 'error', $4::text))
WHERE id = $1 AND attempt = $2 AND state = 'running'`

const sqlNotify = `SELECT pg_notify('cellgate_jobs', $1)`

// sqlComplete marks jobs completed (see cellgate_jobs_complete: attempt
// guard, no wait for the WAL flush).
const sqlComplete = `SELECT cellgate_jobs_complete($1, $2, $3)`

func (b *DB) takeDone() []doneRec {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	return b.takeDoneLocked()
}

func (b *DB) takeDoneLocked() []doneRec {
	if len(b.done) == 0 {
		return nil
	}
	d := b.done
	b.done = make([]doneRec, 0, cap(d))
	return d
}

func (b *DB) putBackDone(d []doneRec) {
	if len(d) == 0 {
		return
	}
	b.cmu.Lock()
	if len(b.done) == 0 {
		b.doneSince = time.Now()
	}
	b.done = append(b.done, d...)
	b.cmu.Unlock()
	signal(b.flushKick)
}

func splitDone(d []doneRec) ([]int64, []int32) {
	if len(d) == 0 {
		return []int64{}, []int32{}
	}
	ids := make([]int64, len(d))
	attempts := make([]int32, len(d))
	for i, r := range d {
		ids[i], attempts[i] = r.id, r.attempt
	}
	return ids, attempts
}

// flushDone writes the buffered completions now.
func (b *DB) flushDone(ctx context.Context) error {
	return b.writeDone(ctx, b.takeDone())
}

func (b *DB) writeDone(ctx context.Context, d []doneRec) error {
	if len(d) == 0 {
		return nil
	}
	ids, attempts := splitDone(d)
	_, err := b.pool.Exec(ctx, sqlComplete, ids, attempts, b.now())
	if err != nil {
		b.putBackDone(d)
	} else {
		b.noteWritten(d)
	}
	return err
}

// noteWritten keeps completions committed without waiting for the WAL
// flush until confirmLoop has made them durable.
func (b *DB) noteWritten(d []doneRec) {
	if len(d) == 0 {
		return
	}
	b.cmu.Lock()
	b.written = append(b.written, d...)
	b.cmu.Unlock()
}

// writeDurably completes d (again: a job already completed, or no longer
// running as that attempt, is left alone) in a transaction that waits for
// its WAL flush. PostgreSQL flushes its WAL in order, so once it commits,
// every completion this process wrote before it is durable too.
func (b *DB) writeDurably(ctx context.Context, d []doneRec) error {
	ids, attempts := splitDone(d)
	var batch pgx.Batch
	batch.Queue("BEGIN")
	batch.Queue(sqlComplete, ids, attempts, b.now())
	// cellgate_jobs_complete turned synchronous_commit off for the
	// transaction; the last setting counts at commit. PostgreSQL waits for
	// the flush only at the commit of a transaction that wrote WAL, and
	// when every completion survived the UPDATE wrote none: a transactional
	// logical message (an empty WAL record, allowed to any role at any
	// wal_level) makes sure it did.
	batch.Queue(`SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'cellgate_jobs', '')`)
	batch.Queue("COMMIT")
	return b.pool.SendBatch(ctx, &batch).Close()
}

// confirmLoop makes the completions written since its last pass durable,
// every CompleteConfirm. A database that crashed after acknowledging a
// completion may have lost it, and the job would sit 'running' until it is
// rescued and run a second time; writing the completion again instead is a
// no-op where it survived. A pass that fails keeps its completions and is
// retried with backoff until the database answers or Close.
func (b *DB) confirmLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.CompleteConfirm)
	defer t.Stop()
	retry := newBackoff(50*time.Millisecond, jobRetryLimit)
	for {
		select {
		case <-t.C:
		case <-b.quit:
			return // Close confirms what is left
		}
		b.cmu.Lock()
		d := b.written
		b.written = nil
		b.cmu.Unlock()
		for len(d) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
			err := b.writeDurably(ctx, d)
			cancel()
			if err == nil {
				retry.reset()
				break
			}
			b.logErr("confirm", fmt.Sprintf("pgjobs: confirming %d completions failed; retrying", len(d)), err)
			if !retry.wait(b.quit) {
				b.noteWritten(d) // for Close
				return
			}
		}
	}
}

// closeDone writes the buffered completions and confirms those written
// before, for the last time, durably; later completions are written one by
// one (Complete after Close). Completions it cannot record are logged by
// job id: those jobs will be rescued and run again.
func (b *DB) closeDone(ctx context.Context) error {
	b.cmu.Lock()
	d := append(b.takeDoneLocked(), b.written...)
	b.written = nil
	b.doneClosed = true
	b.cmu.Unlock()
	if len(d) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	err := b.writeDurably(wctx, d)
	if err != nil {
		ids := make([]int64, len(d))
		for i := range d {
			ids[i] = d[i].id
		}
		b.log.Error("pgjobs: completions not recorded at shutdown; these jobs stay 'running' until they are rescued and run again",
			"ids", ids, "err", err)
	}
	return err
}

// flushLoop writes the completions that have waited CompleteFlush, or at
// once when CompleteBatch are buffered. Claims take the buffer along as they
// go, so while workers are busy the completions ride on claims and the loop
// rarely has anything old enough to write.
func (b *DB) flushLoop() {
	defer b.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	retry := newBackoff(50*time.Millisecond, jobRetryLimit)
	for {
		wait := b.flushWait()
		if wait < 0 {
			// Empty: wait for the first completion.
			select {
			case <-b.flushKick:
			case <-b.flushFull:
			case <-b.quit:
				return // Close writes what is left
			}
			continue
		}
		if wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-b.flushFull:
				t.Stop()
			case <-b.quit:
				return
			}
			continue // a claim may have taken the buffer meanwhile
		}
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		err := b.flushDone(ctx)
		cancel()
		if err != nil {
			b.logErr("complete", "pgjobs: writing completions failed; retrying", err)
			if !retry.wait(b.quit) {
				return
			}
			continue
		}
		retry.reset()
	}
}

// flushWait is how long the oldest buffered completion may still wait: 0
// to write the buffer now, negative when it is empty.
func (b *DB) flushWait() time.Duration {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	if len(b.done) == 0 {
		return -1
	}
	if len(b.done) >= b.cfg.CompleteBatch {
		return 0
	}
	return max(b.cfg.CompleteFlush-time.Since(b.doneSince), 0)
}
