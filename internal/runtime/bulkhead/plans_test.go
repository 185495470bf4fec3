package bulkhead

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPlanMetricsLint(t *testing.T) {
	m, err := NewPlanMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.Refusals.WithLabelValues("request", "free").Inc()
	m.Shadow.WithLabelValues("rate", "pro").Inc()
	for _, c := range []prometheus.Collector{m.Refusals, m.Shadow} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
