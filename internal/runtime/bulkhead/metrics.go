package bulkhead

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the bulkheads' series. None has a tenant label: a tenant id
// is unbounded, and the admission report (an admin endpoint) is where
// per-tenant figures live.
type Metrics struct {
	// RequestRejections is
	// cellgate_tenant_bulkhead_rejections_total{kind="request"}.
	RequestRejections prometheus.Counter
	// DBRejections is cellgate_tenant_bulkhead_rejections_total{kind="db"}.
	DBRejections prometheus.Counter
	// ServerRejections is cellgate_server_admission_rejections_total.
	ServerRejections prometheus.Counter
}

// NewMetrics registers the bulkhead counters and the server limiter's
// gauges (cellgate_server_in_flight_requests,
// cellgate_server_max_concurrent_requests) on reg, which is injected, never
// the global registry.
func NewMetrics(reg prometheus.Registerer, l *Limiter) (*Metrics, error) {
	rej := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cellgate_tenant_bulkhead_rejections_total",
		Help: "Requests (kind=request) and database checkouts (kind=db) refused by a per-tenant bulkhead.",
	}, []string{"kind"})
	srv := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cellgate_server_admission_rejections_total",
		Help: "Requests refused by the server-wide admission limit.",
	})
	cs := []prometheus.Collector{rej, srv}
	if l != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "cellgate_server_in_flight_requests",
				Help: "Counted requests holding a server admission permit (released when the response head is written).",
			}, func() float64 { return float64(l.InFlight()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "cellgate_server_max_concurrent_requests",
				Help: "The server-wide admission limit (0 = none).",
			}, func() float64 { return float64(l.Max()) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &Metrics{
		RequestRejections: rej.WithLabelValues("request"),
		DBRejections:      rej.WithLabelValues("db"),
		ServerRejections:  srv,
	}, nil
}
