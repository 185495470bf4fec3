-- Undoes 000007_durable_claims.up.sql: claims commit without waiting for
-- their WAL flush again.
ALTER FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text[], integer[], integer, text, bigint[], integer[], integer)
    RESET synchronous_commit;
