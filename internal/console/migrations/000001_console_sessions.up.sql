-- The console's sessions, shared by every process of the cell: a logout
-- deletes the row, so a saved cookie is refused by all of them at once.
-- id is the SHA-256 of the cookie (hex), never the cookie itself.
CREATE TABLE IF NOT EXISTS cellgate_console_sessions (
    id         text PRIMARY KEY,
    role       smallint NOT NULL,
    csrf       text NOT NULL,
    token      text NOT NULL,
    created_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS cellgate_console_sessions_expires_idx ON cellgate_console_sessions (expires_at);
