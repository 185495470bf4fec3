-- name: CreateAccount :one
-- CreateAccount signs up an account of a tenant on the tenant's shard.
INSERT INTO accounts (tenant_id, slot, email, name)
VALUES (@tenant_id, @slot, @email, @name)
RETURNING *;

-- name: GetAccount :one
SELECT * FROM accounts
WHERE tenant_id = @tenant_id AND id = @id;

-- name: GetAccountByEmail :one
SELECT * FROM accounts
WHERE tenant_id = @tenant_id AND email = @email;

-- name: CountAccounts :one
SELECT count(*) FROM accounts
WHERE tenant_id = @tenant_id;
