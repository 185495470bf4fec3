// Package promtest reads metric values out of a Prometheus registry for
// tests. It is stateless and safe for concurrent use.
package promtest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value returns the value of one counter or gauge series of g, written as
// name{a="x",b="y"} with its labels in name order (or a bare name for a
// series without labels). A missing series fails the test.
func Value(tb testing.TB, g prometheus.Gatherer, series string) float64 {
	tb.Helper()
	name, labels, _ := strings.Cut(series, "{")
	labels = strings.TrimSuffix(labels, "}")
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			if strings.Join(parts, ",") != labels {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	tb.Fatalf("series %s not found", series)
	return 0
}
