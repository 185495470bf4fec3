package pgjobs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
)

// Per-tenant limits (docs/jobs-postgres.md, "Tenant caps, weights and
// priorities"). Every claim reads them from the database's
// cellgate_jobs_tenant_limits table, so a cap holds across every process
// claiming from the database. The processes write the table from their
// jobs.TenantLimits: before a tenant's first enqueue through this DB, on an
// enqueue that finds the tenant's limits changed, and every
// Config.LimitsEvery for every tenant in the table (limitsLoop), so a
// change reaches the claims within LimitsEvery of the source reporting it.

// limitsCache is what this DB last wrote (or found in the table) per
// tenant, so an enqueue writes only when the source changed.
type limitsCache struct {
	mu sync.RWMutex
	m  map[string]tenantLimits
}

// tenantLimits is one tenant's limits, normalized (jobs.NormalizeLimits).
type tenantLimits struct {
	maxRunning, weight int32
}

func (c *limitsCache) get(tenant string) (tenantLimits, bool) {
	c.mu.RLock()
	l, ok := c.m[tenant]
	c.mu.RUnlock()
	return l, ok
}

func (c *limitsCache) put(tenant string, l tenantLimits) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]tenantLimits)
	}
	c.m[tenant] = l
	c.mu.Unlock()
}

// limitsOf asks the source for tenant's limits.
func (b *DB) limitsOf(tenant string) tenantLimits {
	if b.limits == nil {
		return tenantLimits{weight: 1}
	}
	mr, w := jobs.NormalizeLimits(b.limits.JobLimits(tenant))
	return tenantLimits{maxRunning: int32(min(mr, 1<<30)), weight: int32(w)}
}

// ensureLimits writes the limits of the tenants of ps that the table may
// not have as the source has them, before their jobs are inserted: a job
// is never claimed under limits older than the ones in force when it was
// enqueued. Usually it only reads the cache. It writes on the pool, outside
// any caller's transaction, so the row is not locked until that commits.
func (b *DB) ensureLimits(ctx context.Context, ps []jobs.InsertParams) error {
	if b.limits == nil {
		return nil
	}
	var stale []string
	var vals []tenantLimits
	for i := range ps {
		t := ps[i].Tenant
		if t == "" || slices.Contains(stale, t) {
			continue
		}
		want := b.limitsOf(t)
		if have, ok := b.lcache.get(t); ok && have == want {
			continue
		}
		stale, vals = append(stale, t), append(vals, want)
	}
	if len(stale) == 0 {
		return nil
	}
	if err := b.writeLimits(ctx, stale, vals); err != nil {
		return fmt.Errorf("pgjobs: writing tenant limits on %s: %w", b.name, err)
	}
	return nil
}

// ensureTenant is ensureLimits for one job's tenant.
func (b *DB) ensureTenant(ctx context.Context, tenant string) error {
	if b.limits == nil || tenant == "" {
		return nil
	}
	want := b.limitsOf(tenant)
	if have, ok := b.lcache.get(tenant); ok && have == want {
		return nil
	}
	if err := b.writeLimits(ctx, []string{tenant}, []tenantLimits{want}); err != nil {
		return fmt.Errorf("pgjobs: writing tenant limits on %s: %w", b.name, err)
	}
	return nil
}

// writeLimits upserts the limits of tenants (vals in the same order),
// re-places the waiting jobs of each tenant whose weight changed, and
// places the held jobs a raised or removed cap leaves room for. Only a
// tenant whose cap it raised or removed can have such jobs: a job is held
// only under a cap its tenant's row had when it was enqueued. (A row
// another process wrote while this write ran is compared as it was
// before; held jobs its change leaves room for wait for the maintenance
// leader's pass, which places those of every tenant with room.)
func (b *DB) writeLimits(ctx context.Context, tenants []string, vals []tenantLimits) error {
	caps, weights := make([]int32, len(vals)), make([]int32, len(vals))
	for i, v := range vals {
		caps[i], weights[i] = v.maxRunning, v.weight
	}
	now := b.now()
	rows, err := b.pool.Query(ctx, sqlWriteLimits, tenants, caps, weights, now)
	if err != nil {
		return err
	}
	raised, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(raised) > 0 {
		if _, err := b.pool.Exec(ctx, sqlRefill, raised, now); err != nil {
			return err
		}
	}
	for i, t := range tenants {
		b.lcache.put(t, vals[i])
	}
	return nil
}

// sqlWriteLimits upserts limits rows (in tenant order, so concurrent
// writers lock them in one order) and, for each tenant whose weight it
// changed, re-places the tenant's placed waiting jobs from its first place
// with the new weight's step: the change applies to the backlog already
// placed, not only to the jobs enqueued after it. A row that another
// process already brought up to date is not updated again (the conflict
// re-checks the newest row), so the backlog is re-placed once per change.
// It returns the tenants whose cap it raised or removed.
const sqlWriteLimits = `
WITH input AS (
    SELECT t.tenant, t.max_running, t.weight
    FROM unnest($1::text[], $2::int[], $3::int[]) AS t(tenant, max_running, weight)
    ORDER BY t.tenant COLLATE "C"),
old AS (
    SELECT l.tenant, l.max_running, l.weight FROM cellgate_jobs_tenant_limits l
    WHERE l.tenant = ANY ($1::text[])),
up AS (
    INSERT INTO cellgate_jobs_tenant_limits AS l (tenant, max_running, weight, updated_at)
    SELECT i.tenant, i.max_running, i.weight, $4 FROM input i
    ON CONFLICT (tenant) DO UPDATE
        SET max_running = excluded.max_running, weight = excluded.weight, updated_at = excluded.updated_at
        WHERE (l.max_running, l.weight) IS DISTINCT FROM (excluded.max_running, excluded.weight)
    RETURNING l.tenant, l.max_running, l.weight),
moved AS (
    SELECT r.id, r.first + (r.rn - 1) * greatest(720720 / up.weight, 1)::bigint AS vtime
    FROM up JOIN old ON old.tenant = up.tenant AND old.weight <> up.weight
    CROSS JOIN LATERAL (
        SELECT x.id, row_number() OVER (ORDER BY x.vtime, x.id) AS rn, min(x.vtime) OVER () AS first
        FROM cellgate_jobs x
        WHERE x.state = 'available' AND x.vtime IS NOT NULL AND x.tenant = up.tenant) r),
replaced AS (
    UPDATE cellgate_jobs j SET vtime = moved.vtime
    FROM moved
    WHERE j.id = moved.id AND j.state = 'available' AND j.vtime IS NOT NULL)
SELECT up.tenant::text FROM up JOIN old ON old.tenant = up.tenant
WHERE old.max_running > 0 AND (up.max_running = 0 OR up.max_running > old.max_running)`

// sqlRefill places held jobs of the tenants $1 up to their caps (all of a
// tenant without a cap): see cellgate_jobs_refill in migration 000008.
const sqlRefill = `SELECT cellgate_jobs_refill($1::text[], NULL, $2)`

// limitsLoop brings every tenant's row up to date with the source every
// Config.LimitsEvery, for tenants that enqueue nothing after a change.
func (b *DB) limitsLoop() {
	defer b.wg.Done()
	select {
	case <-b.ready:
	case <-b.quit:
		return
	}
	t := time.NewTicker(b.cfg.LimitsEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.quit:
			return
		}
		if err := b.SyncLimits(context.Background()); err != nil {
			b.logErr("limits", "pgjobs: syncing tenant limits failed; retrying", err)
		}
	}
}

// SyncLimits writes the source's current limits of every tenant in the
// database's limits table whose row differs (the periodic sync does it
// every Config.LimitsEvery). Without a source it does nothing.
func (b *DB) SyncLimits(ctx context.Context) error {
	if b.limits == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	rows, err := b.pool.Query(ctx, `SELECT tenant, max_running, weight FROM cellgate_jobs_tenant_limits`)
	if err != nil {
		return fmt.Errorf("pgjobs: reading tenant limits on %s: %w", b.name, err)
	}
	var stale []string
	var vals []tenantLimits
	for rows.Next() {
		var t string
		var have tenantLimits
		if err := rows.Scan(&t, &have.maxRunning, &have.weight); err != nil {
			rows.Close()
			return fmt.Errorf("pgjobs: reading tenant limits on %s: %w", b.name, err)
		}
		if want := b.limitsOf(t); want != have {
			stale, vals = append(stale, t), append(vals, want)
		} else {
			b.lcache.put(t, have)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgjobs: reading tenant limits on %s: %w", b.name, err)
	}
	if len(stale) == 0 {
		return nil
	}
	if err := b.writeLimits(ctx, stale, vals); err != nil {
		return fmt.Errorf("pgjobs: writing tenant limits on %s: %w", b.name, err)
	}
	return nil
}

// priorityOf is p's priority as the table stores it (0 is 1).
func priorityOf(p *jobs.InsertParams) int16 {
	if p.Priority <= 0 {
		return jobs.PriorityHighest
	}
	return int16(p.Priority)
}
