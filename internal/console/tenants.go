package console

import (
	"context"
	"time"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// topTenants is how many tenants the tenants view shows.
const topTenants = 20

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
	InFlight int64 `json:"in_flight"`
	Cap      int64 `json:"cap"`
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
	// Databases and Partial are as in JobPage.
	Databases []DatabaseStatus `json:"databases"`
	Partial   bool             `json:"partial"`
}

type backlogs struct {
	rows   []pgjobs.TenantBacklog
	totals pgjobs.JobTotals
}

func (c *Console) tenants(ctx context.Context) TenantsReport {
	rep := TenantsReport{Tenants: []TenantRow{}}
	var top []TenantCount
	if c.cfg.Rejections != nil {
		top, rep.Rejections = c.cfg.Rejections.Top(topTenants)
	}
	rep.InFlightKnown = c.cfg.InFlight != nil
	_, lanes, perTenant, applyLanes := c.laneLayout()
	names := make([]string, len(top))
	byName := make(map[string]*TenantRow, len(top))
	rep.Tenants = make([]TenantRow, len(top))
	for i, t := range top {
		names[i] = t.Tenant
		r := &rep.Tenants[i]
		r.Tenant, r.Rejections, r.RejectionsError = t.Tenant, t.Count, t.Error
		r.Slot, r.Shard, r.Cell = c.place.of(t.Tenant)
		r.Lanes = []int{}
		if applyLanes {
			r.Lanes = jobs.ShuffleShard(t.Tenant, lanes, perTenant)
		}
		if c.cfg.InFlight != nil {
			r.InFlight, r.Cap = c.cfg.InFlight(t.Tenant)
		}
		byName[t.Tenant] = r
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
