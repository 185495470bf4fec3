package console

import (
	"github.com/cellgate/cellgate/internal/jobs"
)

// LanesReport is the job runtime's lanes: the layout the spec asks for and,
// when the console sees the workers (Config.Workers), which of them run a
// job now, per lane and per database.
type LanesReport struct {
	// Backend is jobs.backend ("postgres" or "local").
	Backend string `json:"backend"`
	// WorkersPerDatabase is jobs.workers.
	WorkersPerDatabase int `json:"workers_per_database"`
	// Databases is the number of jobs databases; Workers the total.
	Databases int `json:"databases"`
	Workers   int `json:"workers"`
	// Lanes is jobs.tenants.lanes (0 = none: one shared order);
	// LanesPerTenant how many lanes one tenant may use;
	// MaxConcurrentPerTenant its cap of running jobs (0 = none).
	Lanes                  int `json:"lanes"`
	LanesPerTenant         int `json:"lanes_per_tenant"`
	MaxConcurrentPerTenant int `json:"max_concurrent_per_tenant"`
	// Claim is jobs.postgres.claim ("fair" or "fifo").
	Claim string `json:"claim"`
	// LanesApply is true when the backend serves tenants on lanes (the
	// local backend with lanes on); the PostgreSQL backend has none, so
	// PerLane then holds one lane with every worker.
	LanesApply bool `json:"lanes_apply"`
	// Observed is true when the workers' state was read: Busy and the
	// busy columns below are meaningful only then.
	Observed bool `json:"observed"`
	// Busy counts the workers running a job now (of Workers).
	Busy int `json:"busy"`
	// PerLane is each lane's workers, busy workers and tenants.
	PerLane []LaneRow `json:"per_lane"`
	// PerDatabase is each database's workers and busy workers.
	PerDatabase []DatabaseWorkers `json:"per_database"`
}

// LaneRow is one lane.
type LaneRow struct {
	// Lane is its number (worker i serves lane i % lanes).
	Lane int `json:"lane"`
	// Workers serve it; Busy of them run a job now.
	Workers int `json:"workers"`
	Busy    int `json:"busy"`
	// TenantShare is the share of all tenants it serves
	// (lanes_per_tenant / lanes under shuffle sharding).
	TenantShare float64 `json:"tenant_share"`
	// Tenants are the tenants of the tenants view (the most refused) it
	// serves: a bounded list, not every tenant.
	Tenants []string `json:"tenants"`
}

// DatabaseWorkers is one database's workers.
type DatabaseWorkers struct {
	Database string `json:"database"`
	Workers  int    `json:"workers"`
	Busy     int    `json:"busy"`
}

// laneLayout is the effective layout: workers per database, lanes (≥ 1)
// and lanes per tenant, with the runtime's own defaults and clamping, and
// whether the backend applies lanes at all.
func (c *Console) laneLayout() (per, lanes, perTenant int, apply bool) {
	j := c.cfg.Spec.Jobs
	cfg := jobs.Config{Workers: j.Workers, Tenants: jobs.TenantConfig{
		MaxConcurrent: j.Tenants.MaxConcurrent, Lanes: j.Tenants.Lanes, LanesPerTenant: j.Tenants.LanesPerTenant,
	}}
	eff, _, err := cfg.Effective()
	if err != nil {
		eff = cfg.WithDefaults()
	}
	per = max(eff.Workers, 1)
	apply = j.Backend == "local" && eff.Tenants.Lanes > 0
	if !apply {
		return per, 1, 1, false
	}
	return per, eff.Tenants.Lanes, max(min(eff.Tenants.LanesPerTenant, eff.Tenants.Lanes), 1), true
}

// databaseNames are the names of the jobs databases, in worker order (the
// PostgreSQL runtime gives database i the workers [i*per, (i+1)*per)); the
// local backend's one in-memory database is "local".
func (c *Console) databaseNames() []string {
	if len(c.cfg.Databases) == 0 {
		return []string{"local"}
	}
	names := make([]string, len(c.cfg.Databases))
	for i, db := range c.cfg.Databases {
		names[i] = db.Name()
	}
	return names
}

func (c *Console) lanes() LanesReport {
	j := c.cfg.Spec.Jobs
	per, lanes, perTenant, apply := c.laneLayout()
	names := c.databaseNames()
	rep := LanesReport{
		Backend:                j.Backend,
		WorkersPerDatabase:     per,
		Databases:              len(names),
		Workers:                per * len(names),
		Lanes:                  j.Tenants.Lanes,
		LanesPerTenant:         j.Tenants.LanesPerTenant,
		MaxConcurrentPerTenant: j.Tenants.MaxConcurrent,
		Claim:                  j.Postgres.Claim,
		LanesApply:             apply,
		PerLane:                make([]LaneRow, lanes),
		PerDatabase:            make([]DatabaseWorkers, len(names)),
	}
	if apply {
		rep.Lanes, rep.LanesPerTenant = lanes, perTenant
	}
	for l := range rep.PerLane {
		rep.PerLane[l] = LaneRow{Lane: l, TenantShare: float64(perTenant) / float64(lanes), Tenants: []string{}}
	}
	for d, name := range names {
		rep.PerDatabase[d] = DatabaseWorkers{Database: name, Workers: per}
	}
	for w := range per {
		rep.PerLane[w%lanes].Workers += len(names)
	}
	if c.cfg.Workers != nil {
		rep.Observed = true
		for i, id := range c.cfg.Workers(make([]jobs.JobID, 0, rep.Workers)) {
			if id == 0 || i >= rep.Workers {
				continue
			}
			rep.Busy++
			rep.PerDatabase[i/per].Busy++
			rep.PerLane[(i%per)%lanes].Busy++
		}
	}
	if c.cfg.Rejections != nil {
		top, _ := c.cfg.Rejections.Top(topTenants)
		for _, t := range top {
			if !apply {
				rep.PerLane[0].Tenants = append(rep.PerLane[0].Tenants, t.Tenant)
				continue
			}
			for _, l := range jobs.ShuffleShard(t.Tenant, lanes, perTenant) {
				rep.PerLane[l].Tenants = append(rep.PerLane[l].Tenants, t.Tenant)
			}
		}
	}
	return rep
}
