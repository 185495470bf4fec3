-- Periodic jobs and the cancellation of running jobs
-- (docs/jobs-postgres.md, "Periodic jobs" and "Cancelling a job").
--
-- cellgate_jobs_periodic holds, per jobs.periodic entry, the latest period
-- the scheduler handled (enqueued or skipped). The maintenance leader of
-- the control database locks an entry's row, enqueues the periods due since
-- and moves last_period forward in one transaction, so each period is
-- enqueued at most once across restarts and leader changes.
CREATE TABLE cellgate_jobs_periodic (
    name        text        PRIMARY KEY,
    last_period timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- Set when Cancel reaches a running job: its process cancels the job's
-- context (NOTIFY cellgate_jobs_cancel, or the heartbeat that reads this
-- column), and a retry or snooze of it fails it instead. Not indexed: it is
-- read only by id.
ALTER TABLE cellgate_jobs ADD COLUMN cancel_requested_at timestamptz;
