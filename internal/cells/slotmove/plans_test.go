package slotmove

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/slots"
)

// TestMoveTenantRows: the moved tenants' rows of the tenant table are at
// the target's control database before the freeze ends (the target cell
// knows their plans when it first serves them), as they were at the
// source, and gone from the source after the move; a row the target
// changed later than the source is kept; other tenants' rows stay; both
// sides' version rows are bumped so their cells reload.
func TestMoveTenantRows(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	srcCtl, dstCtl, src, dst := controlPair(t, plans.Migrate)
	in := tenantsIn(moveRange, 3)
	out := tenantsIn(slots.Range{Lo: 0, Hi: 8000}, 1)
	w.seed(t, in, 1)
	w.seed(t, out, 1)
	row := func(c *pgx.Conn, tenant, plan, overrides, at string) {
		t.Helper()
		s, _ := slots.Slot(tenant)
		var p *string
		if plan != "" {
			p = &plan
		}
		if _, err := c.Exec(ctx, `INSERT INTO cellgate_tenants (tenant, slot, plan, overrides, updated_by, updated_at)
			VALUES ($1, $2, $3, $4, 'ops', now() + $5::interval)`, tenant, s, p, overrides, at); err != nil {
			t.Fatal(err)
		}
	}
	row(src, in[0], "gold", `{"burst": {"value": 7, "enforce": true}}`, "-1 hour")
	row(src, in[1], "", `{"rate_per_second": {"value": 2, "enforce": false}}`, "-1 hour")
	row(src, in[2], "silver", `{}`, "-1 hour")
	row(dst, in[2], "platinum", `{}`, "0s") // set on the new cell after the source's
	row(src, out[0], "gold", `{}`, "-1 hour")
	content := func(c *pgx.Conn, tenant string) string {
		t.Helper()
		var s string
		err := c.QueryRow(ctx, `SELECT ROW(tenant, slot, plan, overrides, updated_by, updated_at)::text FROM cellgate_tenants WHERE tenant = $1`, tenant).Scan(&s)
		if err == pgx.ErrNoRows {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	version := func(c *pgx.Conn) int64 {
		t.Helper()
		var v int64
		if err := c.QueryRow(ctx, `SELECT version FROM cellgate_tenants_version`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := map[string]string{}
	for _, tn := range in[:2] {
		want[tn] = content(src, tn)
	}
	want[in[2]] = content(dst, in[2])
	wantOut := content(src, out[0])

	cfg := w.config(t, moveRange)
	cfg.SourceControl, cfg.TargetControl = srcCtl, dstCtl
	var inFreeze map[string]string
	cfg.AfterCopy = func(context.Context) error {
		inFreeze = map[string]string{}
		for _, tn := range in {
			inFreeze[tn] = content(dst, tn)
		}
		return nil
	}
	rep, err := Move(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range in {
		if inFreeze[tn] != want[tn] {
			t.Errorf("inside the freeze the target holds %s's row as %q; want %q", tn, inFreeze[tn], want[tn])
		}
		if got := content(dst, tn); got != want[tn] {
			t.Errorf("after the move the target holds %s's row as %q; want %q", tn, got, want[tn])
		}
		if got := content(src, tn); got != "" {
			t.Errorf("the source still holds %s's row %q", tn, got)
		}
	}
	if got := content(src, out[0]); got != wantOut {
		t.Errorf("the source holds the staying tenant's row as %q; want %q", got, wantOut)
	}
	if got := content(dst, out[0]); got != "" {
		t.Errorf("the staying tenant's row reached the target: %q", got)
	}
	if rep.TenantsMoved != 3 || rep.Verified[tenantsTable] != 2 {
		t.Errorf("report: %d tenant rows moved, %d verified; want 3 and 2 (one kept newer at the target)", rep.TenantsMoved, rep.Verified[tenantsTable])
	}
	if v := version(src); v == 0 {
		t.Error("the source's tenant table version was not bumped")
	}
	if v := version(dst); v < 2 {
		t.Errorf("the target's tenant table version is %d; want one bump per copy (2)", v)
	}
}
