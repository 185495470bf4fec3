-- Indexes for the operator console's job list (internal/console), which at
-- a million jobs must find a tenant's jobs, or the failed ones, without
-- walking the primary key past every other job. docs/jobs-postgres.md
-- lists them with the claim indexes.
--
-- Both are partial and leave out the jobs that ready enqueues and claims
-- write: a ready job (state 'available', placed: vtime set) and a running
-- one are in neither, so an enqueue of a ready job and a claim write no
-- entry in them. Completions, failures, cancels and scheduled or retried
-- jobs (available, not placed) do. The list reads a tenant's other jobs
-- from indexes the claims already keep: its placed jobs from
-- cellgate_jobs_tenant_vtime_idx, its running jobs from
-- cellgate_jobs_running_idx.
--
-- Built without CONCURRENTLY: golang-migrate sends a file as one
-- multi-statement query, which PostgreSQL runs as one transaction, where
-- CONCURRENTLY is refused. The build holds a SHARE lock, so enqueues wait
-- for it (about a second per 500,000 jobs).

-- A tenant's jobs that are not placed in the fair order and not running,
-- newest first: finished ones (kept for the retention period) and waiting
-- ones not placed yet (scheduled, backing off, retried).
CREATE INDEX cellgate_jobs_tenant_list_idx ON cellgate_jobs (tenant, id)
    WHERE state IN ('completed', 'failed') OR (state = 'available' AND vtime IS NULL);

-- Failed jobs, newest first: few among many completed ones, so a list of
-- them would otherwise walk the whole table.
CREATE INDEX cellgate_jobs_failed_idx ON cellgate_jobs (id)
    WHERE state = 'failed';
