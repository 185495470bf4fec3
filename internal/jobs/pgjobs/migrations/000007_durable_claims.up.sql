-- Claims wait for their WAL flush. cellgate_jobs_claim turns
-- synchronous_commit off for its transaction; a claim lost in a PostgreSQL
-- crash put its jobs back to 'available' while their workers ran them, so
-- they ran again, and the completions of the first runs were dropped (the
-- jobs were no longer running as those attempts). A SET clause on the
-- function limits the body's set_config(..., true) to the function: at its
-- exit the caller's setting (on by default) is back, and the claim commits
-- durably. The buffered completions a claim carries are then durable too.
-- cellgate_jobs_complete keeps committing without the wait: the backend
-- writes those completions again durably (confirmLoop).
ALTER FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text[], integer[], integer, text, bigint[], integer[], integer)
    SET synchronous_commit = on;
