-- Drops exactly what 000001_jobs.up.sql creates. The functions first: a
-- PL/pgSQL body does not depend on the tables it names, so nothing else
-- would drop them.
DROP FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text[], integer[], integer, text, bigint[], integer[], integer);
DROP FUNCTION cellgate_jobs_complete(bigint[], integer[], timestamptz);
DROP FUNCTION cellgate_jobs_insert_many(text[], text[], text[], text[], integer[], timestamptz[], timestamptz);
DROP FUNCTION cellgate_jobs_insert(text, text, text, jsonb, integer, text, timestamptz, timestamptz);
DROP FUNCTION cellgate_jobs_vtimes(text[], timestamptz[], timestamptz);
DROP TABLE cellgate_jobs_head;
DROP TABLE cellgate_jobs;
