-- Online slot moves stream a range's changes through a publication whose
-- row filter is on slot. PostgreSQL refuses UPDATE and DELETE on a table
-- in such a publication unless the replica identity covers slot, and the
-- primary key (tenant_id, id) does not. A unique index on the key plus slot
-- used as the replica identity makes UPDATE and DELETE log only those
-- three columns of the old row (REPLICA IDENTITY FULL would log every
-- column of it on every change).
CREATE UNIQUE INDEX accounts_replica_identity ON accounts (tenant_id, id, slot);
ALTER TABLE accounts REPLICA IDENTITY USING INDEX accounts_replica_identity;

CREATE UNIQUE INDEX orders_replica_identity ON orders (tenant_id, id, slot);
ALTER TABLE orders REPLICA IDENTITY USING INDEX orders_replica_identity;
