package bulkhead

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/tenant"
)

// TenantConfig configures the per-tenant bulkhead middleware. It reads the
// tenant the tenancy middleware stored in the request context; a request
// without one (tenancy off, or a public path) passes through uncounted.
type TenantConfig struct {
	// Skipper selects requests that are never counted. Default: none
	// (requests without a tenant are never counted anyway).
	Skipper middleware.Skipper
	// Requests admits each request (cost 1) for its tenant: its
	// MaxConcurrent is tenancy.max_concurrent_requests, and its rate and
	// funding settings are the optional rate limit and quota. nil: no
	// request bulkhead.
	Requests *admission.Engine
	// Rejections counts the 503s of the request bulkhead (the series
	// cellgate_tenant_bulkhead_rejections_total{kind="request"}); nil
	// counts nothing. Rate and quota refusals are in the engine's outcome
	// tallies instead.
	Rejections prometheus.Counter
	// OnReject, when set, is told the tenant of every request the bulkhead
	// refuses (concurrency, capacity, rate or quota), for the operator
	// console's top tenants. It runs on the request's goroutine.
	OnReject func(tenant string)
	// RateRejection answers a request over its tenant's rate. Default:
	// RateRejection(Requests' rate). Unused with Plans.
	RateRejection *Rejection
	// Plans, when its Store is set, resolve each tenant's plan: refusals
	// are counted and answered per plan (a rate refusal carries the plan's
	// RateLimit-Policy), and shadow overrides are counted. Requests must
	// then take its limits from the same store (RequestLimits).
	Plans PlanConfig
}

// DefaultTenantConfig holds the defaults TenantWithConfig applies to zero
// fields.
var DefaultTenantConfig = TenantConfig{
	Skipper: middleware.DefaultSkipper,
}

// TenantWithConfig returns the per-tenant bulkhead middleware. For a
// request with a tenant it asks cfg.Requests for a permit: refused for
// concurrency or capacity, it answers 503 with Retry-After: 1; for rate,
// 429 with Retry-After; for quota, 429. Admitted, the permit is held until
// the response head is written or the handler returns. Database permits
// are bound by DBPermits.Shard, the innermost step.
func TenantWithConfig(cfg TenantConfig) (echo.MiddlewareFunc, error) {
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultTenantConfig.Skipper
	}
	if cfg.RateRejection == nil {
		rate := 0.0
		if cfg.Requests != nil {
			rate = cfg.Requests.Config().Rate
		}
		cfg.RateRejection = RateRejection(rate)
	}
	m := &tenantMW{cfg: cfg}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return m.serve(c, next) }
	}, nil
}

type tenantMW struct{ cfg TenantConfig }

func (m *tenantMW) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.cfg.Skipper(c) {
		return next(c)
	}
	id, ok := tenant.From(c.Request().Context())
	if !ok {
		return next(c)
	}
	if e := m.cfg.Requests; e != nil {
		p, o := e.Admit(id, 1)
		if o != admission.Admitted {
			if m.cfg.OnReject != nil {
				m.cfg.OnReject(id)
			}
			if m.cfg.Plans.Store != nil {
				return m.planReject(c, id, m.cfg.Plans.Store.Resolve(id, ""), o)
			}
			return m.reject(c, o)
		}
		if m.cfg.Plans.Store != nil && m.cfg.Plans.Store.Snapshot().HasShadows() {
			m.shadow(id)
		}
		res := c.Response()
		g, installed := install(res, heldTenant)
		g.tenant = p
		g.held.Or(heldTenant)
		defer g.finish(res, heldTenant, installed)
	}
	return next(c)
}

func (m *tenantMW) reject(c echo.Context, o admission.Outcome) error {
	switch o {
	case admission.RejectedRate:
		return m.cfg.RateRejection.Write(c)
	case admission.RejectedQuota:
		return ErrTenantQuota.Write(c)
	}
	if m.cfg.Rejections != nil {
		m.cfg.Rejections.Inc()
	}
	if o == admission.RejectedCapacity {
		return ErrTenantCapacity.Write(c)
	}
	return ErrTenantOverloaded.Write(c)
}
