package slotmove

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The tenant table (internal/plans: cellgate_tenants in the control
// database, one row per tenant with a plan or overrides, keyed by tenant
// and carrying the tenant's slot) goes with the moved tenants when
// Config.SourceControl and TargetControl are set. Its rows are copied
// twice:
//
//   - before the freeze, as upserts, so the target cell knows the moved
//     tenants' plans before their first request reaches it;
//   - after the switch, with the source rows locked (an operator's change
//     made there meanwhile waits, then finds no row): copied again,
//     verified (count and checksum), committed at the target, then
//     deleted at the source.
//
// A target row changed after the source's (an operator set the tenant's
// plan on the new cell already) is kept: the upsert only replaces older
// rows. Each side's version row is bumped and its channel notified in the
// same transaction, as internal/plans.Apply does, so every process of both
// cells reloads the table at once. Both steps are idempotent: a re-run
// after a crash between the two commits copies the same rows again and
// deletes them at the source.

const (
	// tenantsTable, tenantsVersionTable and tenantsChannel are
	// internal/plans' table, version row and plans.Channel (named here:
	// this tool does not link the plans package).
	tenantsTable        = "cellgate_tenants"
	tenantsVersionTable = "cellgate_tenants_version"
	tenantsChannel      = "cellgate_tenants"
	// tenantCols is a tenant row's content: what is copied and checksummed.
	tenantCols = "tenant, slot, plan, overrides, updated_by, updated_at"
)

// movePlans copies the range's tenant rows from the source cell's control
// database to the target's; with final, it locks them at the source first
// and deletes them there once the target has committed. It does nothing
// when the layout names no control databases or the source has no tenant
// table (tenancy off).
func (mv *mover) movePlans(ctx context.Context, rep *Report, final bool) error {
	sc, tc := mv.cfg.SourceControl, mv.cfg.TargetControl
	if sc.DSN == "" || tc.DSN == "" {
		return nil
	}
	src, err := connectControl(ctx, sc)
	if err != nil {
		return err
	}
	defer src.conn.Close(context.WithoutCancel(ctx))
	if ok, err := hasTable(ctx, src.conn, tenantsTable); err != nil || !ok {
		if err != nil {
			return fmt.Errorf("slotmove: tenant table on %s: %w", src.name, err)
		}
		return nil
	}
	dst, err := connectControl(ctx, tc)
	if err != nil {
		return err
	}
	defer dst.conn.Close(context.WithoutCancel(ctx))

	stx, err := src.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("slotmove: tenant table on %s: %w", src.name, err)
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	lock := ""
	if final {
		lock = " FOR UPDATE"
	}
	rows, err := stx.Query(ctx, "SELECT tenant FROM "+tenantsTable+" WHERE slot BETWEEN $1 AND $2 ORDER BY tenant"+lock,
		mv.cfg.Range.Lo, mv.cfg.Range.Hi)
	if err != nil {
		return fmt.Errorf("slotmove: read tenant table on %s: %w", src.name, err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("slotmove: read tenant table on %s: %w", src.name, err)
	}
	if len(tenants) == 0 {
		return nil
	}
	if ok, err := hasTable(ctx, dst.conn, tenantsTable); err != nil || !ok {
		if err != nil {
			return fmt.Errorf("slotmove: tenant table on %s: %w", dst.name, err)
		}
		return fmt.Errorf("slotmove: %d moved tenants have rows in %s on %s, but %s has no such table; migrate the target cell's control database (server migrate) first",
			len(tenants), tenantsTable, src.name, dst.name)
	}
	copied, err := mv.copyTenantRows(ctx, stx, dst, tenants)
	if err != nil {
		return err
	}
	if !final {
		mv.log.Info("tenant rows copied", "rows", len(copied), "kept_newer_at_target", len(tenants)-len(copied))
		return nil
	}
	if _, err := stx.Exec(ctx, "DELETE FROM "+tenantsTable+" WHERE tenant = ANY($1)", tenants); err != nil {
		return fmt.Errorf("slotmove: delete tenant rows on %s: %w", src.name, err)
	}
	if err := bumpTenants(ctx, stx); err != nil {
		return fmt.Errorf("slotmove: tenant table on %s: %w", src.name, err)
	}
	if err := stx.Commit(ctx); err != nil {
		return fmt.Errorf("slotmove: delete tenant rows on %s (they are on %s already; run the move again to delete them): %w", src.name, dst.name, err)
	}
	rep.TenantsMoved += int64(len(tenants))
	rep.Verified[tenantsTable] += int64(len(copied))
	mv.log.Info("tenant rows moved", "rows", len(tenants), "kept_newer_at_target", len(tenants)-len(copied))
	return nil
}

// copyTenantRows upserts the rows of tenants, read in stx at the source,
// into dst's tenant table, verifies the ones it wrote and commits dst. It
// returns the tenants whose rows it wrote (not those newer at the target).
func (mv *mover) copyTenantRows(ctx context.Context, stx pgx.Tx, dst *shardConn, tenants []string) ([]string, error) {
	rows, err := stx.Query(ctx, "SELECT "+tenantCols+" FROM "+tenantsTable+" WHERE tenant = ANY($1)", tenants)
	if err != nil {
		return nil, fmt.Errorf("slotmove: read tenant rows: %w", err)
	}
	vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		return nil, fmt.Errorf("slotmove: read tenant rows: %w", err)
	}
	dtx, err := dst.conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("slotmove: tenant table on %s: %w", dst.name, err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := dtx.Exec(ctx, "CREATE TEMP TABLE cellgate_move_tenants (LIKE "+tenantsTable+") ON COMMIT DROP"); err != nil {
		return nil, fmt.Errorf("slotmove: tenant table on %s: %w", dst.name, err)
	}
	if _, err := dtx.CopyFrom(ctx, pgx.Identifier{"cellgate_move_tenants"},
		[]string{"tenant", "slot", "plan", "overrides", "updated_by", "updated_at"}, pgx.CopyFromRows(vals)); err != nil {
		return nil, fmt.Errorf("slotmove: copy tenant rows to %s: %w", dst.name, err)
	}
	wrote, err := dtx.Query(ctx, `INSERT INTO `+tenantsTable+` (`+tenantCols+`) SELECT `+tenantCols+` FROM cellgate_move_tenants
		ON CONFLICT (tenant) DO UPDATE SET slot = EXCLUDED.slot, plan = EXCLUDED.plan, overrides = EXCLUDED.overrides,
			updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at
		WHERE `+tenantsTable+`.updated_at <= EXCLUDED.updated_at
		RETURNING tenant`)
	if err != nil {
		return nil, fmt.Errorf("slotmove: write tenant rows on %s: %w", dst.name, err)
	}
	copied, err := pgx.CollectRows(wrote, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("slotmove: write tenant rows on %s: %w", dst.name, err)
	}
	sum := "SELECT count(*), coalesce(sum(hashtextextended(ROW(" + tenantCols + ")::text, 0)), 0)::text FROM " + tenantsTable + " WHERE tenant = ANY($1)"
	var sn, tn int64
	var ssum, tsum string
	if err := stx.QueryRow(ctx, sum, copied).Scan(&sn, &ssum); err != nil {
		return nil, fmt.Errorf("slotmove: verify tenant rows at the source: %w", err)
	}
	if err := dtx.QueryRow(ctx, sum, copied).Scan(&tn, &tsum); err != nil {
		return nil, fmt.Errorf("slotmove: verify tenant rows on %s: %w", dst.name, err)
	}
	if sn != tn || ssum != tsum {
		return nil, &VerifyError{Table: tenantsTable, Range: mv.cfg.Range, SourceRows: sn, TargetRows: tn, SourceSum: ssum, TargetSum: tsum}
	}
	if err := bumpTenants(ctx, dtx); err != nil {
		return nil, fmt.Errorf("slotmove: tenant table on %s: %w", dst.name, err)
	}
	if err := dtx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("slotmove: tenant table on %s: %w", dst.name, err)
	}
	return copied, nil
}

// bumpTenants bumps the tenant table's version and notifies its channel,
// in tx, so every process of the cell reloads the table when tx commits.
func bumpTenants(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "UPDATE "+tenantsVersionTable+" SET version = version + 1"); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, 'slotmove')", tenantsChannel)
	return err
}

// connectControl opens a control database named by the Config.
func connectControl(ctx context.Context, sh Shard) (*shardConn, error) {
	pc, err := pgx.ParseConfig(sh.DSN)
	if err != nil {
		return nil, fmt.Errorf("slotmove: control database %s: %w", sh.Name, err)
	}
	for k, v := range sessionParams {
		pc.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("slotmove: control database %s: %w", sh.Name, err)
	}
	return &shardConn{name: sh.Name, conn: c}, nil
}

// hasTable reports whether the database has the table.
func hasTable(ctx context.Context, c *pgx.Conn, table string) (bool, error) {
	var ok bool
	err := c.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok)
	return ok, err
}
