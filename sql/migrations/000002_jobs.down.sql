DROP FUNCTION IF EXISTS cellgate_jobs_claim(timestamptz, integer, boolean, text, text[], integer[], integer, text, bigint[], integer[]);
DROP FUNCTION IF EXISTS cellgate_jobs_complete(bigint[], integer[], timestamptz);
DROP FUNCTION IF EXISTS cellgate_jobs_insert(text, text, text, jsonb, integer, text, timestamptz, timestamptz);
DROP TABLE IF EXISTS cellgate_jobs;
