package console

import (
	"context"
	"html/template"
	"math"
	"sync"
	"time"

	"github.com/cellgate/cellgate/internal/console/consolechart"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
)

// The series' bounds: SeriesPoints samples each (one hour at the default
// 10 s), for the cell and at most SeriesTenants tenants, so the sampler
// holds at most (1 + SeriesTenants) × 3 × SeriesPoints points whatever the
// number of tenants.
const (
	SeriesPoints  = 360
	SeriesTenants = 8
)

// ringSet is one subject's three series.
type ringSet struct {
	completed, refusals, backlog *consolechart.Ring
}

func newRingSet() ringSet {
	return ringSet{consolechart.NewRing(SeriesPoints), consolechart.NewRing(SeriesPoints), consolechart.NewRing(SeriesPoints)}
}

func (r ringSet) reset() {
	r.completed.Reset()
	r.refusals.Reset()
	r.backlog.Reset()
}

// tenantSlot is one sampled tenant: its rings and the cumulative counts of
// the previous sample, per database, that the next one subtracts.
type tenantSlot struct {
	name  string // "" = free
	rank  int    // its place among the most refused at the last sample
	rings ringSet
	// lastCompleted[d] is its completed jobs in database d at the last
	// sample that database answered; known[d] whether there is one. A
	// database first heard of sets its baseline and adds nothing, so a
	// tenant first sampled while a database was down does not show that
	// database's completed jobs as one interval's burst when it is back.
	lastCompleted []int64
	known         []bool
	// lastRefusals is its refusals at the last sample (known when its
	// rings hold one).
	lastRefusals uint64
}

// sampler keeps the console's series. Its memory is fixed when it is made
// (rings and slots); mu guards it (the sampler writes, pages read).
type sampler struct {
	sampling sync.Mutex // one sample at a time

	mu    sync.Mutex
	cell  ringSet
	slots [SeriesTenants]tenantSlot
	lastT time.Time // the previous sample ("" = none)
	// lastDone and lastRefusals are the cell's counts at the previous
	// sample (known when its ring holds one: a ring is filled from the
	// same source at every sample, or never).
	lastDone     uint64
	lastRefusals uint64
}

func newSampler(databases int) *sampler {
	s := &sampler{cell: newRingSet()}
	for i := range s.slots {
		s.slots[i].rings = newRingSet()
		s.slots[i].lastCompleted = make([]int64, databases)
		s.slots[i].known = make([]bool, databases)
	}
	return s
}

// RunSampler samples at once and then every Config.SampleEvery until ctx
// ends, and returns then. It starts no goroutine: its owner runs it (the
// cell in its own wait group) and stops it by cancelling ctx.
func (c *Console) RunSampler(ctx context.Context) {
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	c.Sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sample(ctx)
		}
	}
}

// samplePart is one database's answer to a sample.
type samplePart struct {
	tenants []pgjobs.TenantBacklog
	waiting int64
}

// Sample takes one sample at Config.Now: the cell's completed jobs (from
// the workers' own counts), refusals (the top-K total) and waiting jobs
// (each database's claim-index count), and for the most refused tenants
// their completed and ready jobs (one query per database over their rows
// only) and refusals. Rates are per second over the time since the previous
// sample; a value that cannot be known (a database down, a first sample)
// is a gap, never a guess.
func (c *Console) Sample(ctx context.Context) {
	s := c.ser
	s.sampling.Lock()
	defer s.sampling.Unlock()

	var top []TenantCount
	var total uint64
	if c.cfg.Rejections != nil {
		top, total = c.cfg.Rejections.Top(SeriesTenants)
	}
	names := make([]string, len(top))
	for i, t := range top {
		names[i] = t.Tenant
	}
	parts := fanOut(ctx, c.cfg.Databases, c.cfg.DatabaseTimeout, func(ctx context.Context, db Database) (samplePart, error) {
		var p samplePart
		st, err := db.Stats(ctx)
		if err != nil {
			return p, err
		}
		for _, q := range st {
			p.waiting += int64(q.Waiting)
		}
		if len(names) > 0 {
			p.tenants, err = db.TenantBacklogs(ctx, names)
		}
		return p, err
	})
	var done uint64
	if c.cfg.Completed != nil {
		done = c.cfg.Completed()
	}
	now := c.cfg.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	secs := 0.0
	if !s.lastT.IsZero() {
		secs = now.Sub(s.lastT).Seconds()
	}
	rate := func(cur, last uint64, known bool) float64 {
		if !known {
			return math.NaN()
		}
		return consolechart.Rate(cur, last, secs)
	}

	// The cell.
	if c.cfg.Completed != nil {
		s.cell.completed.Add(now, rate(done, s.lastDone, s.cell.completed.Len() > 0))
		s.lastDone = done
	} else {
		s.cell.completed.Gap(now)
	}
	if c.cfg.Rejections != nil {
		s.cell.refusals.Add(now, rate(total, s.lastRefusals, s.cell.refusals.Len() > 0))
		s.lastRefusals = total
	} else {
		s.cell.refusals.Gap(now)
	}
	all := len(parts) > 0
	var waiting int64
	for _, p := range parts {
		if p.err != nil {
			all = false
		}
		waiting += p.val.waiting
	}
	if all {
		s.cell.backlog.Add(now, float64(waiting))
	} else {
		s.cell.backlog.Gap(now)
	}

	// The tenants: keep the slots of those still among the most refused,
	// free the others', give the newcomers free ones.
	rank := make(map[string]int, len(top))
	for i, t := range top {
		rank[t.Tenant] = i
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if r, ok := rank[sl.name]; ok && sl.name != "" {
			sl.rank = r
			delete(rank, sl.name)
			continue
		}
		sl.free()
	}
	for name, r := range rank {
		for i := range s.slots {
			if s.slots[i].name == "" {
				s.slots[i].name, s.slots[i].rank = name, r
				break
			}
		}
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.name == "" {
			continue
		}
		var delta int64
		deltaKnown := false
		var ready int64
		for d, p := range parts {
			if p.err != nil {
				continue
			}
			var b pgjobs.TenantBacklog
			for _, row := range p.val.tenants {
				if row.Tenant == sl.name {
					b = row
					break
				}
			}
			ready += b.Ready
			if sl.known[d] {
				// Completed jobs leave with the retention sweep: a drop
				// counts as none completed, not as a negative rate.
				delta += max(b.Completed-sl.lastCompleted[d], 0)
				deltaKnown = true
			}
			sl.lastCompleted[d], sl.known[d] = b.Completed, true
		}
		if deltaKnown && secs > 0 {
			sl.rings.completed.Add(now, float64(delta)/secs)
		} else {
			sl.rings.completed.Gap(now)
		}
		if all {
			sl.rings.backlog.Add(now, float64(ready))
		} else {
			sl.rings.backlog.Gap(now)
		}
		count := top[sl.rank].Count
		sl.rings.refusals.Add(now, rate(count, sl.lastRefusals, sl.rings.refusals.Len() > 0))
		sl.lastRefusals = count
	}
	s.lastT = now
}

// free empties a slot for another tenant (its memory stays).
func (sl *tenantSlot) free() {
	sl.name, sl.rank, sl.lastRefusals = "", 0, 0
	clear(sl.lastCompleted)
	clear(sl.known)
	sl.rings.reset()
}

// seriesSnap is a copy of the series, taken under the lock and drawn
// without it.
type seriesSnap struct {
	last    time.Time
	cell    [3][]consolechart.Point
	tenants []tenantSnap
}

type tenantSnap struct {
	name   string
	series [3][]consolechart.Point
}

func (r ringSet) snap() [3][]consolechart.Point {
	return [3][]consolechart.Point{r.completed.Points(nil), r.refusals.Points(nil), r.backlog.Points(nil)}
}

func (s *sampler) snapshot() seriesSnap {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := seriesSnap{last: s.lastT, cell: s.cell.snap()}
	byRank := make([]*tenantSlot, SeriesTenants)
	for i := range s.slots {
		if sl := &s.slots[i]; sl.name != "" && sl.rank < SeriesTenants {
			byRank[sl.rank] = sl
		}
	}
	for _, sl := range byRank {
		if sl != nil {
			out.tenants = append(out.tenants, tenantSnap{name: sl.name, series: sl.rings.snap()})
		}
	}
	return out
}

// SeriesPoint is one sample in the series API; a null V is a gap (nothing
// could be measured then).
type SeriesPoint = consolechart.JSONPoint

// SeriesSet is one subject's series, oldest sample first.
type SeriesSet struct {
	// CompletedPerSecond: jobs completed per second over each interval
	// (the cell: this process's workers; a tenant: its jobs in every
	// database).
	CompletedPerSecond []SeriesPoint `json:"completed_per_s"`
	// RefusalsPerSecond: tenant-bulkhead refusals per second.
	RefusalsPerSecond []SeriesPoint `json:"refusals_per_s"`
	// Backlog: the cell's waiting jobs (ready or scheduled, the claim
	// index's count), a tenant's ready jobs.
	Backlog []SeriesPoint `json:"backlog"`
}

// TenantSeries is one tenant's series.
type TenantSeries struct {
	Tenant string `json:"tenant"`
	SeriesSet
}

// SeriesReport is /admin/api/series: the last hour of the cell and of the
// most refused tenants.
type SeriesReport struct {
	// Every is the sampling period; Points how many samples a series
	// keeps at most.
	Every  time.Duration `json:"every_ns"`
	Points int           `json:"points"`
	// Cell is the whole cell's series.
	Cell SeriesSet `json:"cell"`
	// Tenants are the sampled tenants, the most refused first (at most
	// SeriesTenants).
	Tenants []TenantSeries `json:"tenants"`
}

func jsonSet(s [3][]consolechart.Point) SeriesSet {
	return SeriesSet{consolechart.JSONPoints(s[0]), consolechart.JSONPoints(s[1]), consolechart.JSONPoints(s[2])}
}

func (c *Console) series() SeriesReport {
	snap := c.ser.snapshot()
	rep := SeriesReport{Every: c.cfg.SampleEvery, Points: SeriesPoints, Cell: jsonSet(snap.cell), Tenants: []TenantSeries{}}
	for _, t := range snap.tenants {
		rep.Tenants = append(rep.Tenants, TenantSeries{Tenant: t.name, SeriesSet: jsonSet(t.series)})
	}
	return rep
}

// window is the charts' time axis: the hour the series can hold, ending at
// the last sample (or now, before the first).
func (c *Console) window(last time.Time) (from, to time.Time) {
	to = last
	if to.IsZero() {
		to = c.cfg.Now()
	}
	return to.Add(-time.Duration(SeriesPoints) * c.cfg.SampleEvery), to
}

// cellCharts draws the cell's series for the overview.
func (c *Console) cellCharts() map[string]template.HTML {
	snap := c.ser.snapshot()
	from, to := c.window(snap.last)
	return map[string]template.HTML{
		"Throughput": consolechart.Time(consolechart.TimeOptions{ID: "chart-throughput", Title: "jobs completed and requests refused per second, last hour", From: from, To: to, Unit: "/s"},
			consolechart.Series{Label: "jobs completed", Color: "#2e8540", Points: snap.cell[0]},
			consolechart.Series{Label: "requests refused", Color: "#b42318", Points: snap.cell[1]}),
		"Backlog": consolechart.Time(consolechart.TimeOptions{ID: "chart-backlog", Title: "waiting jobs, last hour", From: from, To: to, Height: 160},
			consolechart.Series{Label: "waiting jobs", Color: "#b54708", Points: snap.cell[2]}),
	}
}

// tenantCharts draws the sampled tenants' series for the tenants view.
func (c *Console) tenantCharts() map[string]template.HTML {
	snap := c.ser.snapshot()
	from, to := c.window(snap.last)
	out := map[string]template.HTML{}
	for k, m := range []struct{ key, id, title, unit string }{
		{"Completed", "chart-tenant-completed", "jobs completed per second by tenant, last hour", "/s"},
		{"Refusals", "chart-tenant-refusals", "requests refused per second by tenant, last hour", "/s"},
		{"Backlog", "chart-tenant-backlog", "ready jobs by tenant, last hour", ""},
	} {
		series := make([]consolechart.Series, len(snap.tenants))
		for i, t := range snap.tenants {
			series[i] = consolechart.Series{Label: t.name, Points: t.series[k]}
		}
		out[m.key] = consolechart.Time(consolechart.TimeOptions{ID: m.id, Title: m.title, From: from, To: to, Unit: m.unit, Height: 220}, series...)
	}
	return out
}

// compile-time check: the backends the console reads are Databases.
var _ Database = (*pgjobs.DB)(nil)
