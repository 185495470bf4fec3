-- The propagated trace context (W3C traceparent, tracestate) of the span
-- that enqueued a job, so the job's span joins the enqueuing request's
-- trace. NULL for a job enqueued outside a trace.
--
-- The insert functions do not name the column: its default reads the
-- transaction-local setting cellgate.trace_context, which an enqueue with
-- a trace context sets in the same round trip as its insert and clears
-- after it (internal/jobs/pgjobs/insert.go). current_setting is STABLE, so
-- adding the column rewrites no row: existing jobs get NULL.
ALTER TABLE cellgate_jobs
    ADD COLUMN trace_context jsonb
    DEFAULT NULLIF(current_setting('cellgate.trace_context', true), '')::jsonb;
