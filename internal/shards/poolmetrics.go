package shards

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolDesc is one pool metric: its descriptor, its type and how to read it
// from a pool's Stat.
type poolDesc struct {
	desc  *prometheus.Desc
	vt    prometheus.ValueType
	value func(*pgxpool.Stat) float64
}

// PoolCollector is a prometheus.Collector over the pgxpools of a Set (the
// control database and each of the cell's shards), read with Stat at
// scrape time, so it costs the request path nothing. A saturated pool
// (acquired = max, acquire wait rising, empty acquires counting) tells
// itself apart from a slow database (acquired below max, queries slow).
// The database label is ControlName or a shard's spec name, as in
// cellgate_database_up: bounded by the spec.
//
// Concurrency: safe for concurrent scrapes; the Set's pools are fixed at
// Open.
type PoolCollector struct {
	pools []namedPool
	descs []poolDesc
}

type namedPool struct {
	database string
	pool     *pgxpool.Pool
}

// NewPoolCollector returns the collector of s's pools; register it once
// per registry.
func NewPoolCollector(s *Set) *PoolCollector {
	pools := []namedPool{{ControlName, s.control}}
	for _, sh := range s.shards {
		pools = append(pools, namedPool{sh.Name, sh.Pool})
	}
	label := []string{"database"}
	gauge := func(name, help string, f func(*pgxpool.Stat) float64) poolDesc {
		return poolDesc{prometheus.NewDesc(name, help, label, nil), prometheus.GaugeValue, f}
	}
	counter := func(name, help string, f func(*pgxpool.Stat) float64) poolDesc {
		return poolDesc{prometheus.NewDesc(name, help, label, nil), prometheus.CounterValue, f}
	}
	return &PoolCollector{pools: pools, descs: []poolDesc{
		gauge("cellgate_db_pool_acquired_connections",
			"Connections of the database's pool checked out now.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }),
		gauge("cellgate_db_pool_idle_connections",
			"Connections of the database's pool open and idle now.",
			func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }),
		gauge("cellgate_db_pool_total_connections",
			"Connections of the database's pool now: acquired, idle and being opened.",
			func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) }),
		gauge("cellgate_db_pool_max_connections",
			"Most connections the database's pool opens (database.*.max_conns).",
			func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }),
		counter("cellgate_db_pool_acquires_total",
			"Successful connection checkouts from the database's pool.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquireCount()) }),
		counter("cellgate_db_pool_acquire_wait_seconds_total",
			"Time spent in successful checkouts from the database's pool, waiting for a connection or opening one.",
			func(s *pgxpool.Stat) float64 { return s.AcquireDuration().Seconds() }),
		counter("cellgate_db_pool_canceled_acquires_total",
			"Checkouts from the database's pool abandoned because their context ended first.",
			func(s *pgxpool.Stat) float64 { return float64(s.CanceledAcquireCount()) }),
		counter("cellgate_db_pool_empty_acquires_total",
			"Successful checkouts that found no idle connection and waited for one to be returned or opened.",
			func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }),
	}}
}

// Describe sends every metric's descriptor.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d.desc
	}
}

// Collect reads each pool's Stat once and sends its series.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.pools {
		st := p.pool.Stat()
		for _, d := range c.descs {
			ch <- prometheus.MustNewConstMetric(d.desc, d.vt, d.value(st), p.database)
		}
	}
}
