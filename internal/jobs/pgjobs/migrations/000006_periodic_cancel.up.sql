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

-- A row per running job whose cancellation was asked: its process cancels
-- the job's context (NOTIFY cellgate_jobs_cancel, or the heartbeat that
-- reads this table), and a retry, snooze or rescue of it fails it instead.
-- A table of its own rather than a column of cellgate_jobs: it stays a few
-- rows (the maintenance leader deletes those of jobs no longer running),
-- and the jobs table's rows keep their size.
CREATE TABLE cellgate_jobs_cancel_requests (
    job_id       bigint      PRIMARY KEY,
    requested_at timestamptz NOT NULL
);
