package runtime

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// gauge reads one series, written as name{a="x",b="y"} with labels in name
// order (or a bare name), from reg; a missing series fails the test.
func gauge(t testing.TB, reg prometheus.Gatherer, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(series, "{")
	labels = strings.TrimSuffix(labels, "}")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
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
	t.Fatalf("series %s not found", series)
	return 0
}
