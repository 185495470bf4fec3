DROP TABLE IF EXISTS cellgate_idempotency_keys;
