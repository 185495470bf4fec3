package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/internal/dbmigrate"
	"github.com/cellgate/cellgate/internal/shards"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Table is the table of keys on every shard. A slot move that should carry
// the tenants' keys names it beside the tenant tables.
const Table = "cellgate_idempotency_keys"

// Files are the table's migrations, applied to every shard under their own
// migrations table.
var Files = dbmigrate.Files{FS: migrationFS, Dir: "migrations", Table: "cellgate_idempotency_schema_migrations"}

// outcome is what a claim found.
type outcome int

const (
	claimed  outcome = iota // the key is ours: run the handler
	replay                  // a stored answer of the same request
	busy                    // another request holds the key
	mismatch                // the key was used with another request
)

// record is a key's row as a claim reads it.
type record struct {
	hash        []byte
	state       string
	token       []byte
	leaseUntil  time.Time
	expiresAt   time.Time
	status      *int32
	contentType *string
	body        []byte
}

// claimSQL reads the key and, when there is none, inserts it in progress:
// one round trip for a first request and for a replay alike. The insert
// can only meet a row committed after the statement's snapshot (a
// concurrent first request); the caller then reads again.
const claimSQL = `
WITH cur AS (
    SELECT request_hash, state, lease_token, lease_until, expires_at, status, content_type, body
    FROM cellgate_idempotency_keys
    WHERE tenant_id = $1 AND route = $2 AND idem_key = $3
), ins AS (
    INSERT INTO cellgate_idempotency_keys
        (tenant_id, slot, route, idem_key, request_hash, state, lease_token, lease_until, expires_at, created_at)
    SELECT $1, $4, $2, $3, $5, 'in_progress', $6, $7, $8, $9
    WHERE NOT EXISTS (SELECT 1 FROM cur)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), c.request_hash, c.state, c.lease_token, c.lease_until, c.expires_at, c.status, c.content_type, c.body
FROM (SELECT 1) AS one LEFT JOIN cur AS c ON true`

// takeoverSQL gives an abandoned key (lease expired while in progress) or
// an expired one to a new request. NOWAIT: a row locked by a transaction
// storing its answer right now is busy, never waited for.
const takeoverSQL = `
WITH locked AS (
    SELECT 1 FROM cellgate_idempotency_keys
    WHERE tenant_id = $1 AND route = $2 AND idem_key = $3 AND lease_token = $4
    FOR UPDATE NOWAIT
)
UPDATE cellgate_idempotency_keys
SET request_hash = $5, state = 'in_progress', lease_token = $6, lease_until = $7, expires_at = $8,
    created_at = $9, status = NULL, content_type = NULL, body = NULL
FROM locked
WHERE tenant_id = $1 AND route = $2 AND idem_key = $3 AND lease_token = $4
  AND ((state = 'in_progress' AND lease_until <= $9) OR expires_at <= $9)`

// storeSQL records the answer; in the handler's transaction when it wrote
// through one. It matches only while the lease is still this request's.
const storeSQL = `
UPDATE cellgate_idempotency_keys
SET state = 'done', status = $5, content_type = $6, body = $7
WHERE tenant_id = $1 AND route = $2 AND idem_key = $3 AND lease_token = $4 AND state = 'in_progress'`

// releaseSQL removes this request's in-progress mark, so a retry runs the
// handler again.
const releaseSQL = `
DELETE FROM cellgate_idempotency_keys
WHERE tenant_id = $1 AND route = $2 AND idem_key = $3 AND lease_token = $4 AND state = 'in_progress'`

// sweepSQL deletes a batch of expired keys, never one whose lease still
// runs; SKIP LOCKED leaves rows being stored to the next sweep.
const sweepSQL = `
DELETE FROM cellgate_idempotency_keys
WHERE ctid IN (
    SELECT ctid FROM cellgate_idempotency_keys
    WHERE expires_at <= $1 AND NOT (state = 'in_progress' AND lease_until > $1)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`

// ident is one key: the tenant, the route and the client's key.
type ident struct {
	tenant string
	slot   int
	route  string
	key    string
}

// errLeaseLost is a stored answer that found the key no longer this
// request's: its lease expired and a retry took it over.
var errLeaseLost = errors.New("idempotency: the key's lease expired and another request took it over")

// newToken returns a random lease token.
func newToken() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return b
}

// claim takes the key for this request, or says why not. It loops at most
// a few times: each turn ends in an answer unless a concurrent request
// changed the row between two statements.
func (k *Keys) claim(ctx context.Context, conn *pgxpool.Conn, id ident, hash, token []byte) (outcome, record, error) {
	for range 4 {
		now := k.now()
		var (
			inserted bool
			rec      record
			hashCol  []byte
			state    *string
			leaseU   *time.Time
			expires  *time.Time
		)
		err := conn.QueryRow(ctx, claimSQL, id.tenant, id.route, id.key, id.slot, hash, token,
			now.Add(k.lease), now.Add(k.ttl), now).
			Scan(&inserted, &hashCol, &state, &rec.token, &leaseU, &expires, &rec.status, &rec.contentType, &rec.body)
		if err != nil {
			return 0, rec, err
		}
		if inserted {
			return claimed, rec, nil
		}
		if state == nil {
			continue // inserted and committed by another request after our snapshot
		}
		rec.hash, rec.state, rec.leaseUntil, rec.expiresAt = hashCol, *state, *leaseU, *expires
		expired := !now.Before(rec.expiresAt)
		switch {
		case !expired && !bytes.Equal(rec.hash, hash):
			return mismatch, rec, nil
		case !expired && rec.state == "done":
			return replay, rec, nil
		case !expired && now.Before(rec.leaseUntil):
			return busy, rec, nil
		}
		tag, err := conn.Exec(ctx, takeoverSQL, id.tenant, id.route, id.key, rec.token, hash, token,
			now.Add(k.lease), now.Add(k.ttl), now)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "55P03": // lock_not_available
			return busy, rec, nil
		case err != nil:
			return 0, rec, err
		case tag.RowsAffected() == 1:
			return claimed, rec, nil
		}
		// Another request took it over or finished it first: read again.
	}
	return busy, record{}, nil
}

// store writes the answer through q: the handler's transaction, or the
// shard's pool.
func store(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, id ident, token []byte, a answer) error {
	tag, err := q.Exec(ctx, storeSQL, id.tenant, id.route, id.key, token, a.status, a.contentType, a.body)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errLeaseLost
	}
	return nil
}

// release deletes this request's in-progress mark.
func release(ctx context.Context, sh *shards.Shard, id ident, token []byte) error {
	_, err := sh.Pool.Exec(ctx, releaseSQL, id.tenant, id.route, id.key, token)
	return err
}

// Sweep deletes the keys of sh that expired at now, in batches of batch
// rows, and returns how many it deleted. Keys whose lease still runs are
// kept whatever their expiry.
func Sweep(ctx context.Context, sh *shards.Shard, now time.Time, batch int) (int64, error) {
	var total int64
	for {
		tag, err := sh.Pool.Exec(ctx, sweepSQL, now, batch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
