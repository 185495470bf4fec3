ALTER TABLE cellgate_jobs DROP COLUMN trace_context;
