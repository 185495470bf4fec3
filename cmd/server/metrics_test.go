package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBootMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newBootMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.databaseUp.WithLabelValues("control").Set(1)
	m.migrationsFailed.Set(1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(m.migrationsFailed); got != 1 {
		t.Fatalf("cellgate_migrations_failed = %v, want 1", got)
	}
	if _, err := newBootMetrics(reg); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
}
