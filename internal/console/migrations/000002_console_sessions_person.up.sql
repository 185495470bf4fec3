-- The person of an OpenID Connect login (the ID token's sub and email),
-- so every audit line of the session names them; '' for a token login.
ALTER TABLE cellgate_console_sessions ADD COLUMN IF NOT EXISTS subject text NOT NULL DEFAULT '';
ALTER TABLE cellgate_console_sessions ADD COLUMN IF NOT EXISTS email text NOT NULL DEFAULT '';
