ALTER TABLE cellgate_console_sessions DROP COLUMN IF EXISTS email;
ALTER TABLE cellgate_console_sessions DROP COLUMN IF EXISTS subject;
