package runtime

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
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
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// statusClasses are the code label values, indexed by status/100; index
// gone is "499", a request whose client went away (see clientGone).
var statusClasses = [...]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx", "499"}

const gone = len(statusClasses) - 1

// route returns the middleware for one route. Its series are bound at
// registration, so a request pays two clock reads, one counter increment
// and one histogram observation, with no label lookup.
func (m *httpMetrics) route(method, path string) echo.MiddlewareFunc {
	var counts [len(statusClasses)]prometheus.Counter
	for i, class := range statusClasses {
		counts[i] = m.requests.WithLabelValues(path, method, class)
	}
	obs := m.duration.WithLabelValues(path, method)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			returned := false
			defer func() {
				status := http.StatusInternalServerError // a panic: recover answers 500
				if returned {
					status = c.Response().Status
					if err != nil && !c.Response().Committed {
						// The error handler writes the response after us.
						status = errorStatus(err).status
					}
				}
				i := status / 100
				if i < 1 || i >= gone {
					i = 0
				}
				if returned && err != nil && !c.Response().Committed && clientGone(c, err) {
					i = gone
				}
				counts[i].Inc()
				obs.Observe(time.Since(start).Seconds())
			}()
			err = next(c)
			returned = true
			return err
		}
	}
}
