package bulkhead

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/tenant"
)

// newEngine returns an engine on a manual clock, closed at the end of tb.
func newEngine(tb testing.TB, mod func(*admission.Config)) *admission.Engine {
	tb.Helper()
	cfg := admission.DefaultConfig()
	cfg.Clock = admission.NewManualClock()
	if mod != nil {
		mod(&cfg)
	}
	e, err := admission.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

// fakeTenancy stands in for the tenancy middleware: the tenant comes from
// the X-Tenant header, as is.
func fakeTenancy(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(tenant.With(r.Context(), r.Header.Get("X-Tenant"))))
		return next(c)
	}
}

// recoverMW turns a panic into a 500, like the runtime's recover.
func recoverMW(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = echo.NewHTTPError(http.StatusInternalServerError, "panic")
			}
		}()
		return next(c)
	}
}

// counter returns a fresh counter.
func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "test"})
}

// do serves one request for tenant (empty: none) on e.
func do(e *echo.Echo, method, path, tenantID string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if tenantID != "" {
		req.Header.Set("X-Tenant", tenantID)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// hijackRecorder is a recorder that can be hijacked.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	hijacked bool
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.hijacked = true
	a, b := net.Pipe()
	b.Close()
	return a, bufio.NewReadWriter(bufio.NewReader(a), bufio.NewWriter(a)), nil
}
