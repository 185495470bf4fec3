package console

import (
	"context"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/plans"
)

// topTenants is how many of the most refused tenants the tenants view
// shows (from Rejections, then from LimitCounts).
const topTenants = 20

// tableTenants bounds the tenant table's rows the tenants view lists
// besides the most refused ones: the page stays one page.
const tableTenants = 200

// TenantRow is one tenant of the tenants view.
type TenantRow struct {
	// Tenant is the tenant id.
	Tenant string `json:"tenant"`
	// Rejections counts its refusals by the tenant bulkhead since start;
	// RejectionsError is how much of that may be other tenants' (TopK).
	Rejections      uint64 `json:"rejections"`
	RejectionsError uint64 `json:"rejections_error"`
	// Slot, Shard and Cell place it.
	Slot  int    `json:"slot"`
	Shard string `json:"shard"`
	Cell  string `json:"cell"`
	// Available, Ready, Running and Completed count its jobs over every
	// database; OldestReadyAge is its oldest ready job's wait.
	Available      int64         `json:"available"`
	Ready          int64         `json:"ready"`
	Running        int64         `json:"running"`
	Completed      int64         `json:"completed"`
	OldestReadyAge time.Duration `json:"oldest_ready_age_ns"`
	// CompletedShare is its share of all completed jobs (0..1).
	CompletedShare float64 `json:"completed_share"`
	// InFlight is its requests admitted and not yet done, against Cap
	// (tenancy.max_concurrent_requests, 0 = none); both 0 when the
	// console cannot see the request engine (TenantsReport.InFlightKnown).
	// With plans, Cap is its plan's (or override's) request cap.
	InFlight int64 `json:"in_flight"`
	Cap      int64 `json:"cap"`
	// Plan is its plan and the limits in force; nil when the cell has no
	// plans (Config.Plans).
	Plan *TenantPlan `json:"plan,omitempty"`
	// Limited counts its refusals and shadow refusals per resource; nil
	// when the console does not count them (Config.LimitCounts) or holds
	// none for the tenant.
	Limited *LimitTally `json:"limited,omitempty"`
	// Lanes are the job lanes that serve it (shuffle sharding); empty when
	// the backend has no lanes.
	Lanes []int `json:"lanes"`
}

// TenantsReport is the tenants view: the tenants refused most, with their
// place and their jobs.
type TenantsReport struct {
	// Tenants are the most refused first.
	Tenants []TenantRow `json:"tenants"`
	// Rejections counts every refusal since start.
	Rejections uint64 `json:"rejections"`
	// FairShare is 1 / the tenants with jobs (counted per database): the
	// share of completed jobs each would get if all were served alike.
	FairShare float64 `json:"fair_share"`
	// InFlightKnown is true when the rows' InFlight and Cap were read.
	InFlightKnown bool `json:"in_flight_known"`
	// Plans are the spec's plans in order and DefaultPlan the default;
	// both empty when the cell has no plans. TableTenants counts the
	// tenant table's rows (at most tableTenants of them are listed).
	Plans        []string `json:"plans"`
	DefaultPlan  string   `json:"default_plan,omitempty"`
	TableTenants int      `json:"table_tenants"`
	// LimitsCounted is true when the rows' Limited were read.
	LimitsCounted bool `json:"limits_counted"`
	// Databases and Partial are as in JobPage.
	Databases []DatabaseStatus `json:"databases"`
	Partial   bool             `json:"partial"`
}

type backlogs struct {
	rows   []pgjobs.TenantBacklog
	totals pgjobs.JobTotals
}

func (c *Console) tenants(ctx context.Context) TenantsReport {
	rep := TenantsReport{Tenants: []TenantRow{}, Plans: []string{}}
	var top []TenantCount
	if c.cfg.Rejections != nil {
		top, rep.Rejections = c.cfg.Rejections.Top(topTenants)
	}
	rep.InFlightKnown = c.cfg.InFlight != nil
	rep.LimitsCounted = c.cfg.LimitCounts != nil
	var snap *plans.Snapshot
	if c.cfg.Plans != nil {
		snap = c.cfg.Plans.Snapshot()
		rep.Plans, rep.DefaultPlan = snap.Catalog().Names(), snap.Catalog().Default()
		rep.TableTenants = len(snap.Rows())
	}
	names := tenantNames(top, c.cfg.LimitCounts, snap)
	place := c.placeNow()
	_, lanes, perTenant, applyLanes := c.laneLayout()
	byName := make(map[string]*TenantRow, len(names))
	rep.Tenants = make([]TenantRow, len(names))
	for i, name := range names {
		r := &rep.Tenants[i]
		r.Tenant = name
		if i < len(top) {
			r.Rejections, r.RejectionsError = top[i].Count, top[i].Error
		}
		r.Slot, r.Shard, r.Cell = place.of(name)
		r.Lanes = []int{}
		if applyLanes {
			r.Lanes = jobs.ShuffleShard(name, lanes, perTenant)
		}
		if c.cfg.InFlight != nil {
			r.InFlight, r.Cap = c.cfg.InFlight(name)
		}
		if snap != nil {
			p := tenantPlan(snap, name)
			r.Plan = &p
			if c.cfg.InFlight != nil {
				r.Cap = int64(p.Effective.MaxConcurrentRequests)
			}
		}
		if c.cfg.LimitCounts != nil {
			if t, ok := c.cfg.LimitCounts.Of(name); ok {
				r.Limited = &t
			}
		}
		byName[name] = r
	}
	parts := fanOut(ctx, c.cfg.Databases, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) (backlogs, error) {
		rows, tot, err := db.Backlogs(ctx, names)
		return backlogs{rows, tot}, err
	})
	rep.Databases, rep.Partial = statuses(parts)
	var completed, tenants int64
	for _, p := range parts {
		completed += p.val.totals.Completed
		tenants += p.val.totals.Tenants
		for _, b := range p.val.rows {
			r := byName[b.Tenant]
			if r == nil {
				continue
			}
			r.Available += b.Available
			r.Ready += b.Ready
			r.Running += b.Running
			r.Completed += b.Completed
			r.OldestReadyAge = max(r.OldestReadyAge, b.OldestReadyAge)
		}
	}
	if tenants > 0 {
		rep.FairShare = 1 / float64(tenants)
	}
	if completed > 0 {
		for i := range rep.Tenants {
			rep.Tenants[i].CompletedShare = float64(rep.Tenants[i].Completed) / float64(completed)
		}
	}
	return rep
}

// tenantNames lists the tenants of the view: the most refused (in top's
// order, so their rows line up with top), then the most limited the
// LimitCounts holds, then the tenant table's rows (up to tableTenants), each
// once.
func tenantNames(top []TenantCount, lc *LimitCounts, snap *plans.Snapshot) []string {
	seen := make(map[string]bool, len(top))
	names := make([]string, 0, len(top))
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, t := range top {
		add(t.Tenant)
	}
	if lc != nil {
		for _, n := range lc.Top(topTenants) {
			add(n)
		}
	}
	if snap != nil {
		rows := snap.Rows()
		for _, r := range rows[:min(len(rows), tableTenants)] {
			add(r.Tenant)
		}
	}
	return names
}

// TenantPlan is a tenant's plan as the view shows it.
type TenantPlan struct {
	// Name is the plan in force (without a token's claim, which only a
	// request carries, unless this process has seen one: Source "claim").
	Name string `json:"name"`
	// Source says where it comes from: claim, table or default.
	Source plans.Source `json:"source"`
	// Row is the tenant's row of the tenant table: its own plan ("" =
	// none), its overrides, who changed it and when. InTable is false when
	// it has none.
	Row     plans.Row `json:"row"`
	InTable bool      `json:"in_table"`
	// Limits are the limits in force, field by field, in plans.Fields
	// order.
	Limits []TenantLimit `json:"limits"`
	// Effective is the resolved limits (the request cap, for Cap).
	Effective plans.Limits `json:"-"`
}

// TenantLimit is one limit of a tenant.
type TenantLimit struct {
	// Field names it as the tenant table does; Label as the page does.
	Field plans.Field `json:"field"`
	Label string      `json:"label"`
	// Value is in force (0: no limit, except jobs.weight).
	Value float64 `json:"value"`
	// From is "override" (an enforced override) or "plan".
	From string `json:"from"`
	// Override is the row's override of the field (enforced or shadow),
	// nil when it has none; Shadow is true for a shadow one.
	Override *plans.Override `json:"override,omitempty"`
	Shadow   bool            `json:"shadow"`
}

// limitLabels are the page's short names of the fields.
var limitLabels = map[plans.Field]string{
	plans.MaxConcurrentRequests: "requests",
	plans.MaxDBConnections:      "db",
	plans.RatePerSecond:         "rate",
	plans.Burst:                 "burst",
	plans.JobsMaxConcurrent:     "job cap",
	plans.JobsWeight:            "weight",
}

// tenantPlan resolves tenant on snap for the view.
func tenantPlan(snap *plans.Snapshot, tenant string) TenantPlan {
	e := snap.Resolve(tenant, "")
	row, in := snap.Row(tenant)
	if !in {
		row = plans.Row{Tenant: tenant}
	}
	p := TenantPlan{Name: e.Plan, Source: snap.PlanSource(tenant), Row: row, InTable: in, Effective: e.Limits}
	p.Limits = make([]TenantLimit, 0, len(plans.Fields()))
	for i, f := range plans.Fields() {
		l := TenantLimit{Field: f, Label: limitLabels[f], Value: e.Limits.Get(f), From: "plan"}
		if e.Overridden&(1<<i) != 0 {
			l.From = "override"
		}
		if o, ok := row.Overrides[f]; ok {
			l.Override, l.Shadow = &o, !o.Enforce
		}
		p.Limits = append(p.Limits, l)
	}
	return p
}
