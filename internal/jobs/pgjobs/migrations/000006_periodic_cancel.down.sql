-- Undoes 000006_periodic_cancel.up.sql.
ALTER TABLE cellgate_jobs DROP COLUMN cancel_requested_at;
DROP TABLE cellgate_jobs_periodic;
