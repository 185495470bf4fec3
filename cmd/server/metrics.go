package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/shards"
)

// bootMetrics are the cell's metrics about its databases that no package
// below cmd/server sees whole: each database's answer to /readyz and the
// app's migrations. The monitoring mixin alerts on them
// (CellgateShardUnavailable, CellgateMigrationsFailing).
type bootMetrics struct {
	databaseUp        *prometheus.GaugeVec
	migrationsApplied prometheus.Gauge
	migrationsFailed  prometheus.Gauge
}

func newBootMetrics(reg prometheus.Registerer) (*bootMetrics, error) {
	m := &bootMetrics{
		databaseUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cellgate_database_up",
			Help: "1 when the database answered the last readiness probe's ping, 0 when it did not, by database (control or shard name).",
		}, []string{"database"}),
		migrationsApplied: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_migrations_applied",
			Help: "1 once the app's migrations are applied to control and every shard of the cell, 0 while they are not.",
		}),
		migrationsFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cellgate_migrations_failed",
			Help: "1 once one of the app's migrations failed in a database (final: the cell stays unready until it is repaired and restarted), else 0.",
		}),
	}
	for _, c := range []prometheus.Collector{m.databaseUp, m.migrationsApplied, m.migrationsFailed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// readiness registers one /readyz check per database (control first, then
// the shards in spec order), each keeping cellgate_database_up current, so
// a failing probe and the metric both name the database that is down.
func (m *bootMetrics) readiness(set *shards.Set, add func(string, func(context.Context) error)) {
	type db struct {
		name string
		ping func(context.Context) error
	}
	dbs := []db{{shards.ControlName, set.Control().Ping}}
	for _, sh := range set.Shards() {
		dbs = append(dbs, db{sh.Name, sh.Pool.Ping})
	}
	for _, d := range dbs {
		up := m.databaseUp.WithLabelValues(d.name)
		add("database "+d.name, func(ctx context.Context) error {
			if err := d.ping(ctx); err != nil {
				up.Set(0)
				return err
			}
			up.Set(1)
			return nil
		})
	}
}
