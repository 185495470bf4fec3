-- Undoes 000006_periodic_cancel.up.sql.
DROP TABLE cellgate_jobs_cancel_requests;
DROP TABLE cellgate_jobs_periodic;
