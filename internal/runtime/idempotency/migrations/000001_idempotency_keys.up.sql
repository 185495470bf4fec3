-- The Idempotency-Key records of the routes marked idempotent, on every
-- shard, owned by the runtime (internal/runtime/idempotency) and applied
-- under their own migrations table. A key belongs to one tenant and one
-- route; its row carries the tenant's slot, so a slot move copies it with
-- the tenant's rows.
CREATE TABLE cellgate_idempotency_keys (
    tenant_id    text        NOT NULL,
    slot         integer     NOT NULL CHECK (slot BETWEEN 0 AND 16383),
    -- route is the method and the route's path pattern ("POST /orders").
    route        text        NOT NULL,
    idem_key     text        NOT NULL,
    -- request_hash is SHA-256 of the method, the request target and the
    -- body: the same key with another request is refused (422).
    request_hash bytea       NOT NULL,
    -- state: in_progress while a request holds the key, done once its
    -- answer is stored.
    state        text        NOT NULL CHECK (state IN ('in_progress', 'done')),
    -- lease_token names the request holding the key; a takeover changes it,
    -- so the first holder's late answer is not stored.
    lease_token  bytea       NOT NULL,
    lease_until  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    status       integer,
    content_type text,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, route, idem_key),
    CHECK (state = 'in_progress' OR status IS NOT NULL)
);

CREATE INDEX cellgate_idempotency_keys_slot_idx ON cellgate_idempotency_keys (slot);
CREATE INDEX cellgate_idempotency_keys_expires_idx ON cellgate_idempotency_keys (expires_at);

-- Online slot moves stream changes through a publication filtered on slot,
-- which needs a replica identity covering slot (as the app's tables do in
-- sql/migrations/000002_replica_identity).
CREATE UNIQUE INDEX cellgate_idempotency_keys_replica_identity ON cellgate_idempotency_keys (tenant_id, route, idem_key, slot);
ALTER TABLE cellgate_idempotency_keys REPLICA IDENTITY USING INDEX cellgate_idempotency_keys_replica_identity;
