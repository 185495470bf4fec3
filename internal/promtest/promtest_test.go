package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y"})
	reg.MustRegister(c, g)
	c.WithLabelValues("1", "2").Add(3)
	c.WithLabelValues("1", "9").Add(5)
	g.Set(7)
	if v := Value(t, reg, `x_total{a="1",b="2"}`); v != 3 {
		t.Fatalf("counter = %v", v)
	}
	if v := Value(t, reg, "y"); v != 7 {
		t.Fatalf("gauge = %v", v)
	}
}
