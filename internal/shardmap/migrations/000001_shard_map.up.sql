-- The cell's shard map in force: one versioned record (which shard holds
-- each slot, which slots are frozen for a move). Every write bumps version
-- and notifies cellgate_shard_map; the cell's processes follow it.
CREATE TABLE cellgate_shard_map (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    version    bigint NOT NULL CHECK (version > 0),
    map        jsonb NOT NULL CHECK (jsonb_typeof(map) = 'object'),
    updated_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per running process of the cell: the map version it applies,
-- how many of its requests that started on a replaced map are still in
-- flight, and when it last said so. A slot move waits until every live
-- row reports the version it wrote (and, when asked, no older request).
CREATE TABLE cellgate_shard_map_applied (
    process         text PRIMARY KEY CHECK (process <> ''),
    version         bigint NOT NULL,
    older_in_flight bigint NOT NULL DEFAULT 0,
    heartbeat       timestamptz NOT NULL DEFAULT now()
);
