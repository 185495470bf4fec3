-- The cell's live tenant table: a tenant's plan and per-field overrides.
-- slot lets a slot move carry a range's rows to another cell.
CREATE TABLE cellgate_tenants (
    tenant     text PRIMARY KEY CHECK (tenant <> ''),
    slot       integer NOT NULL CHECK (slot BETWEEN 0 AND 16383),
    plan       text CHECK (plan <> ''),
    overrides  jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(overrides) = 'object'),
    updated_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX cellgate_tenants_slot ON cellgate_tenants (slot);

-- One row bumped by every write, so a periodic resync reads one number and
-- reloads the table only when it changed.
CREATE TABLE cellgate_tenants_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL
);

INSERT INTO cellgate_tenants_version (one, version) VALUES (true, 0);
