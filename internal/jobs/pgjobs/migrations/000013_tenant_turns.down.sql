-- Undoes 000013_tenant_turns.up.sql.
DROP FUNCTION cellgate_jobs_ready_tenants();
DROP FUNCTION cellgate_jobs_claim_turns(timestamptz, integer, text[], text[], integer[], text, bigint[], integer[], integer);
DROP INDEX cellgate_jobs_turns_idx;
