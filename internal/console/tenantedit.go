package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/console/consoleauth"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/tenancy"
)

// The modes of an override in the tenants view's form.
const (
	modeEnforce = "enforce"
	modeShadow  = "shadow"
)

// maxChangeBody bounds a tenant change's JSON body.
const maxChangeBody = 64 << 10

// errNoPlans answers a change on a cell without plans.
var errNoPlans = errors.New("this cell has no tenant plans (tenancy is off), so there is nothing to change")

// errBadChange marks a change refused before it reached the tenant table:
// its message names the field.
type errBadChange struct{ msg string }

func (e errBadChange) Error() string { return e.msg }

func badChange(format string, args ...any) error {
	return errBadChange{fmt.Sprintf(format, args...)}
}

// TenantChange is the JSON body of POST /admin/api/tenants/{tenant}: what
// to change of the tenant's row; what it leaves out stays as it is.
type TenantChange struct {
	// Plan puts the tenant on a plan of the spec; "" takes it off its
	// table plan (back to its token's plan or the default).
	Plan *string `json:"plan,omitempty"`
	// Set adds or replaces overrides, keyed by field
	// (max_concurrent_requests, ...).
	Set map[string]TenantOverride `json:"set,omitempty"`
	// Unset drops overrides.
	Unset []string `json:"unset,omitempty"`
}

// TenantOverride is one override of a TenantChange: enforced unless Shadow
// (counted, not enforced).
type TenantOverride struct {
	Value  float64 `json:"value"`
	Shadow bool    `json:"shadow"`
}

// TenantChangeResult answers a change: the row before and after, and the
// tenant's plan and limits as this process now serves them.
type TenantChangeResult struct {
	Tenant string     `json:"tenant"`
	Before plans.Row  `json:"before"`
	After  plans.Row  `json:"after"`
	Plan   TenantPlan `json:"plan"`
}

// checkPlan refuses a plan the spec does not have, naming the field.
func checkPlan(cat *plans.Catalog, plan string) error {
	if plan == "" {
		return nil
	}
	if err := cat.CheckPlan(plan); err != nil {
		return badChange("plan: %v", err)
	}
	return nil
}

// checkTenant refuses a tenant id the cell would never extract (the
// tenancy package's rules), so no row is written for a tenant that cannot
// exist.
func checkTenant(tenant string) error {
	if err := tenancy.ValidateID(tenant, 0); err != nil {
		return badChange("tenant: %q: %v", tenant, err)
	}
	return nil
}

// apiChange reads and checks a TenantChange into a plans.Change.
func apiChange(cat *plans.Catalog, tc TenantChange) (plans.Change, error) {
	var c plans.Change
	if tc.Plan != nil {
		if err := checkPlan(cat, *tc.Plan); err != nil {
			return c, err
		}
		c.Plan = tc.Plan
	}
	for name, o := range tc.Set {
		f, err := plans.ParseField(name)
		if err != nil {
			return c, badChange("set: %v", err)
		}
		if err := f.Check(o.Value); err != nil {
			return c, badChange("%v", err)
		}
		if c.Set == nil {
			c.Set = map[plans.Field]plans.Override{}
		}
		c.Set[f] = plans.Override{Value: o.Value, Enforce: !o.Shadow}
	}
	for _, name := range tc.Unset {
		f, err := plans.ParseField(name)
		if err != nil {
			return c, badChange("unset: %v", err)
		}
		if _, both := c.Set[f]; both {
			return c, badChange("%s: both set and unset", f)
		}
		c.Unset = append(c.Unset, f)
	}
	return c, nil
}

// formChange reads the tenants view's form into the change from row (the
// tenant's row as this process sees it): only what differs, so a form
// posted over a stale page leaves alone the fields it did not change. A
// field the form does not carry (the add form carries none) is left as
// it is; an empty value drops the field's override.
func formChange(cat *plans.Catalog, row plans.Row, form url.Values) (plans.Change, error) {
	var c plans.Change
	if _, ok := form["plan"]; ok {
		plan := strings.TrimSpace(form.Get("plan"))
		if err := checkPlan(cat, plan); err != nil {
			return c, err
		}
		if plan != row.Plan {
			c.Plan = &plan
		}
	}
	for _, f := range plans.Fields() {
		if _, ok := form[string(f)]; !ok {
			continue
		}
		v := strings.TrimSpace(form.Get(string(f)))
		old, had := row.Overrides[f]
		if v == "" {
			if had {
				c.Unset = append(c.Unset, f)
			}
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return c, badChange("%s: %q is not a number", f, v)
		}
		if err := f.Check(n); err != nil {
			return c, badChange("%v", err)
		}
		mode := form.Get(string(f) + ".mode")
		if mode == "" {
			mode = modeEnforce
		}
		if mode != modeEnforce && mode != modeShadow {
			return c, badChange("%s.mode: %q; want enforce or shadow", f, mode)
		}
		o := plans.Override{Value: n, Enforce: mode == modeEnforce}
		if !had || old != o {
			if c.Set == nil {
				c.Set = map[plans.Field]plans.Override{}
			}
			c.Set[f] = o
		}
	}
	return c, nil
}

// emptyChange reports whether c changes nothing.
func emptyChange(c plans.Change) bool {
	return c.Plan == nil && len(c.Set) == 0 && len(c.Unset) == 0 && len(c.Shadow) == 0
}

// updatedBy names the person in the tenant table's updated_by: the
// OpenID login's email, else the credential as the audit lines name it.
func updatedBy(w who) string {
	if w.Email != "" {
		return "console:" + w.Email
	}
	return "console:" + w.Actor()
}

// applyTenant writes c to tenant's row through the plans store, under the
// database timeout, and writes the audit line with the row before and
// after.
func (c *Console) applyTenant(ctx context.Context, w who, tenant string, ch plans.Change) (TenantChangeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DatabaseTimeout)
	defer cancel()
	before, after, err := c.cfg.Plans.Apply(ctx, tenant, updatedBy(w), ch)
	outcome, b, a := "ok", rowText(before), rowText(after)
	if err != nil {
		outcome, b, a = err.Error(), "unknown", "unknown"
	}
	consoleauth.Audit(c.log, slog.LevelInfo, w, "set_tenant", outcome, "console", "cell", "tenant", tenant,
		"before", b, "after", a)
	if err != nil {
		return TenantChangeResult{}, err
	}
	return TenantChangeResult{Tenant: tenant, Before: before, After: after, Plan: tenantPlan(c.cfg.Plans.Snapshot(), tenant)}, nil
}

// rowText is a row for an audit line: its plan and overrides, fields in
// order ("plan=- overrides=-" for no row).
func rowText(r plans.Row) string {
	plan := r.Plan
	if plan == "" {
		plan = "-"
	}
	parts := make([]string, 0, len(r.Overrides))
	for f, o := range r.Overrides {
		s := string(f) + "=" + strconv.FormatFloat(o.Value, 'f', -1, 64)
		if !o.Enforce {
			s += "(shadow)"
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	ov := strings.Join(parts, ",")
	if ov == "" {
		ov = "-"
	}
	return "plan=" + plan + " overrides=" + ov
}

// changeStatus maps a change's error to a status and a body.
func changeStatus(err error) (int, apiError) {
	var bad errBadChange
	switch {
	case errors.Is(err, errNoPlans):
		return http.StatusNotImplemented, apiError{err.Error(), "console_not_implemented"}
	case errors.As(err, &bad):
		return http.StatusBadRequest, apiError{err.Error(), "console_bad_value"}
	}
	return http.StatusServiceUnavailable, apiError{"tenant table: " + err.Error(), "console_database_unavailable"}
}

// apiTenantChange is POST /admin/api/tenants/{tenant}: a TenantChange as
// JSON, answered with a TenantChangeResult.
func (c *Console) apiTenantChange(ec echo.Context, w who) error {
	if c.cfg.Plans == nil {
		st, body := changeStatus(errNoPlans)
		return ec.JSON(st, body)
	}
	tenant := ec.Param("tenant")
	if ec.Request().URL.RawPath != "" {
		var err error
		if tenant, err = url.PathUnescape(tenant); err != nil {
			return ec.JSON(http.StatusBadRequest, apiError{"tenant: " + err.Error(), "console_bad_value"})
		}
	}
	if err := checkTenant(tenant); err != nil {
		st, body := changeStatus(err)
		return ec.JSON(st, body)
	}
	var tc TenantChange
	dec := json.NewDecoder(http.MaxBytesReader(ec.Response(), ec.Request().Body, maxChangeBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tc); err != nil {
		return ec.JSON(http.StatusBadRequest, apiError{"body: want a JSON object {plan, set, unset}: " + err.Error(), "console_bad_value"})
	}
	ch, err := apiChange(c.cfg.Plans.Catalog(), tc)
	if err == nil && emptyChange(ch) {
		err = badChange("body: names no change (plan, set or unset)")
	}
	if err != nil {
		st, body := changeStatus(err)
		return ec.JSON(st, body)
	}
	res, err := c.applyTenant(ec.Request().Context(), w, tenant, ch)
	if err != nil {
		st, body := changeStatus(err)
		return ec.JSON(st, body)
	}
	return ec.JSON(http.StatusOK, res)
}

// tenantChangePage is the tenants view's forms (one per tenant, one to add
// a tenant): the change, then back to the view, which says it is saved.
func (c *Console) tenantChangePage(ec echo.Context, w who) error {
	if c.cfg.Plans == nil {
		st, body := changeStatus(errNoPlans)
		return c.render(ec, c.failure(w, st, body.Error))
	}
	// The body's fields only: nothing of the change comes from the URL.
	if err := ec.Request().ParseForm(); err != nil {
		return c.render(ec, c.failure(w, http.StatusBadRequest, "form: "+err.Error()))
	}
	form := ec.Request().PostForm
	tenant := strings.TrimSpace(form.Get("tenant"))
	ch, err := c.tenantFormChange(tenant, form)
	if err == nil && emptyChange(ch) {
		return ec.Redirect(http.StatusSeeOther, Prefix+"tenants?flash=tenant-unchanged")
	}
	if err == nil {
		_, err = c.applyTenant(ec.Request().Context(), w, tenant, ch)
	}
	if err != nil {
		st, body := changeStatus(err)
		return c.render(ec, c.failure(w, st, body.Error))
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"tenants?flash=tenant-saved")
}

// tenantFormChange checks the tenant and reads the form against its row.
func (c *Console) tenantFormChange(tenant string, form url.Values) (plans.Change, error) {
	if err := checkTenant(tenant); err != nil {
		return plans.Change{}, err
	}
	row, _ := c.cfg.Plans.Snapshot().Row(tenant)
	return formChange(c.cfg.Plans.Catalog(), row, form)
}
