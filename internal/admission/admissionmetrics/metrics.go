// Package admissionmetrics exports an admission.Engine's reports as
// Prometheus metrics. It is separate from package admission so that the
// engine itself depends on nothing.
//
// Concurrency: a Collector is safe for concurrent scrapes. Collecting reads
// the engine's control-plane figures (atomics, plus one lock-free pass over
// the accounts for the in-flight gauge); it takes no lock an admission
// takes and claims no affinity.
package admissionmetrics

import (
	"github.com/cellgate/cellgate/internal/admission"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector for one engine. Every metric carries
// the constant label engine=<name>, so one registry can hold the engines of
// several bulkheads ("request", "db"); no metric has a tenant label.
type Collector struct {
	engine *admission.Engine

	outcomes, contended, evictions, accounts, inFlight, affinities, shards, crowded *prometheus.Desc
}

// New returns a collector for e, labelled engine=name. Register it on an
// injected registry (never the global one).
func New(e *admission.Engine, name string) *Collector {
	labels := prometheus.Labels{"engine": name}
	d := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("cellgate_admission_"+metric, help, variable, labels)
	}
	return &Collector{
		engine:     e,
		outcomes:   d("outcomes_total", "Admission decisions by outcome.", "outcome"),
		contended:  d("contended_exchanges_total", "Lease, line, overage and gauge compare-exchanges that lost to another core."),
		evictions:  d("evictions_total", "Accounts removed (idle sweeps, pressure at the account cap, Forget)."),
		accounts:   d("accounts", "Accounts held."),
		inFlight:   d("in_flight_permits", "Permits admitted and not yet released."),
		affinities: d("affinities_assigned", "Affinities the process has issued (P indexes plus explicit claims)."),
		shards:     d("shards", "Shards per account (1 = SINGLE)."),
		crowded:    d("crowded_shards", "Shards carrying more than one affinity (0 for SINGLE)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.outcomes, c.contended, c.evictions, c.accounts, c.inFlight, c.affinities, c.shards, c.crowded} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	e := c.engine
	t := e.Tallies()
	for _, o := range admission.Outcomes() {
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(t.Of(o)), o.String())
	}
	occ := e.Occupancy()
	ch <- prometheus.MustNewConstMetric(c.contended, prometheus.CounterValue, float64(e.ContendedExchanges()))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(e.Evictions()))
	ch <- prometheus.MustNewConstMetric(c.accounts, prometheus.GaugeValue, float64(e.Accounts()))
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(e.InFlight()))
	ch <- prometheus.MustNewConstMetric(c.affinities, prometheus.GaugeValue, float64(occ.AffinitiesAssigned))
	ch <- prometheus.MustNewConstMetric(c.shards, prometheus.GaugeValue, float64(occ.Shards))
	ch <- prometheus.MustNewConstMetric(c.crowded, prometheus.GaugeValue, float64(occ.CrowdedShards()))
}
