-- name: CreateOrder :one
INSERT INTO orders (tenant_id, slot, account_id, amount_cents, note)
VALUES (@tenant_id, @slot, @account_id, @amount_cents, @note)
RETURNING *;

-- name: ListOrders :many
-- ListOrders pages through an account's orders, newest first.
SELECT * FROM orders
WHERE tenant_id = @tenant_id AND account_id = @account_id AND id < @before_id
ORDER BY id DESC
LIMIT @max_rows;

-- name: GetOrder :one
-- GetOrder reads one order of the tenant by id.
SELECT * FROM orders
WHERE tenant_id = @tenant_id AND id = @id;
