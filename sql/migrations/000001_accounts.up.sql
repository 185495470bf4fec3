-- Example domain: accounts and their orders, stored on the shard that owns
-- the tenant's slot. Every row carries its tenant and slot so a slot range can
-- be copied, verified and deleted when it moves to another cell.
CREATE TABLE accounts (
    tenant_id  text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    slot       integer     NOT NULL CHECK (slot BETWEEN 0 AND 16383),
    email      text        NOT NULL,
    name       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, email)
);

CREATE INDEX accounts_slot_idx ON accounts (slot);

CREATE TABLE orders (
    tenant_id    text        NOT NULL,
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    slot         integer     NOT NULL CHECK (slot BETWEEN 0 AND 16383),
    account_id   bigint      NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents >= 0),
    note         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id) ON DELETE CASCADE
);

CREATE INDEX orders_slot_idx ON orders (slot);
CREATE INDEX orders_account_idx ON orders (tenant_id, account_id, id DESC);
