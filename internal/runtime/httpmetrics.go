package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the per-route request series. The route label is the
// registered pattern (bounded by the spec's routes), never the raw path;
// the code label is the status class, or 499 for a request whose client
// went away before the answer. Probes are not instrumented.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_http_requests_total",
			Help: "HTTP requests served on spec routes, by route pattern, method and status class (499: the client went away first).",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellgate_http_request_duration_seconds",
			Help:    "Time from routing to the handler's return (a stream counts whole), by route pattern and method.",
			Buckets: durationBuckets[:],
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// durationBuckets are the request duration histogram's upper bounds, in
// seconds (the route's exemplar limiter keeps one clock per bucket).
var durationBuckets = [...]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// statusClasses are the code label values, indexed by status/100; index
// gone is "499", a request whose client went away (see clientGone).
var statusClasses = [...]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx", "499"}

const gone = len(statusClasses) - 1
