-- Drops exactly what 000003_console_indexes.up.sql creates.
DROP INDEX cellgate_jobs_failed_idx;
DROP INDEX cellgate_jobs_tenant_list_idx;
