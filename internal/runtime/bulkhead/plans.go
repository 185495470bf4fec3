package bulkhead

import (
	"fmt"
	"math"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/plans"
)

// RequestLimits gives the request engine each tenant's request cap and
// rate from its plan and overrides (admission.Config.Limits).
type RequestLimits struct{ Store *plans.Store }

// Limits implements admission.Limiter.
func (l RequestLimits) Limits(tenant string) admission.AccountLimits {
	e := l.Store.Resolve(tenant, "").Limits
	return admission.AccountLimits{MaxConcurrent: int64(e.MaxConcurrentRequests), Rate: e.RatePerSecond, Burst: int64(e.Burst)}
}

// DBLimits gives the database permit engine each tenant's cap.
type DBLimits struct{ Store *plans.Store }

// Limits implements admission.Limiter.
func (l DBLimits) Limits(tenant string) admission.AccountLimits {
	return admission.AccountLimits{MaxConcurrent: int64(l.Store.Resolve(tenant, "").Limits.MaxDBConnections)}
}

// shadowRateLimits gives the shadow engine each tenant's shadow rate (and
// its shadow burst, else its plan's burst); no rate without a shadow one.
type shadowRateLimits struct{ store *plans.Store }

func (l shadowRateLimits) Limits(tenant string) admission.AccountLimits {
	e := l.store.Resolve(tenant, "")
	rate, okRate := e.HasShadow(plans.RatePerSecond)
	burst, okBurst := e.HasShadow(plans.Burst)
	if !okRate && !okBurst {
		return admission.AccountLimits{}
	}
	if !okRate {
		rate = e.Limits.RatePerSecond
	}
	if !okBurst {
		burst = float64(e.Limits.Burst)
	}
	return admission.AccountLimits{Rate: rate, Burst: int64(math.Max(burst, 1))}
}

// PlanMetrics count refusals and shadow refusals per resource and plan,
// never per tenant (a plan label is bounded; a tenant label is not).
type PlanMetrics struct {
	// Refusals is cellgate_tenant_limit_refusals_total{resource,plan}.
	Refusals *prometheus.CounterVec
	// Shadow is cellgate_tenant_limit_shadow_total{resource,plan}: what a
	// shadow override would have refused.
	Shadow *prometheus.CounterVec
}

// NewPlanMetrics registers the plan counters on reg.
func NewPlanMetrics(reg prometheus.Registerer) (*PlanMetrics, error) {
	m := &PlanMetrics{
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_tenant_limit_refusals_total",
			Help: "Tenant requests refused by their plan's limits, by resource (request, rate, quota, db) and plan.",
		}, []string{"resource", "plan"}),
		Shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellgate_tenant_limit_shadow_total",
			Help: "Requests a shadow override would have refused (and did not), by resource (request, rate, db) and plan.",
		}, []string{"resource", "plan"}),
	}
	for _, c := range []prometheus.Collector{m.Refusals, m.Shadow} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PlanConfig is the plan side of the tenant bulkhead.
type PlanConfig struct {
	// Store resolves each tenant's plan and overrides.
	Store *plans.Store
	// Metrics count refusals and shadow refusals by plan.
	Metrics *PlanMetrics
	// ShadowRate checks shadow rate overrides; nil: none are counted.
	ShadowRate *admission.Engine
	// OnLimit, when set, hears the tenant and resource (request, rate,
	// quota, db) of every refusal the plan's limits make (shadow false)
	// and of every request a shadow override would have refused (shadow
	// true), for the operator console's per-tenant counts in bounded
	// memory; the metrics stay per plan. It runs on the request's
	// goroutine, only on those events.
	OnLimit func(tenant, resource string, shadow bool)
}

// onLimit tells OnLimit of one event, when it is set.
func (p PlanConfig) onLimit(tenant, resource string, shadow bool) {
	if p.OnLimit != nil {
		p.OnLimit(tenant, resource, shadow)
	}
}

// NewShadowRateEngine returns the engine that checks shadow rate
// overrides: rate only, never holding a permit.
func NewShadowRateEngine(store *plans.Store, base admission.Config) (*admission.Engine, error) {
	base.MaxConcurrent, base.Rate, base.Burst, base.Funding = 0, 0, 0, 0
	base.Limits = shadowRateLimits{store}
	return admission.New(base)
}

// rateHeaders sets the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) of a rate refusal: the plan's
// policy is burst requests per burst/rate seconds, and none remain for
// retryAfter seconds.
func rateHeaders(c echo.Context, plan string, l plans.Limits, retryAfter int) {
	if !(l.RatePerSecond > 0) {
		return
	}
	w := max(1, int(math.Ceil(float64(l.Burst)/l.RatePerSecond)))
	h := c.Response().Header()
	name := strconv.Quote(plan)
	h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, l.Burst, w))
	h.Set("RateLimit", fmt.Sprintf("%s;r=0;t=%d", name, retryAfter))
}

// planReject answers a refusal of tenant id on plan e.
func (m *tenantMW) planReject(c echo.Context, id string, e plans.Effective, o admission.Outcome) error {
	resource := "request"
	switch o {
	case admission.RejectedRate:
		resource = "rate"
	case admission.RejectedQuota:
		resource = "quota"
	}
	if m.cfg.Plans.Metrics != nil {
		m.cfg.Plans.Metrics.Refusals.WithLabelValues(resource, e.Plan).Inc()
	}
	m.cfg.Plans.onLimit(id, resource, false)
	if o == admission.RejectedRate {
		r := RateRejection(e.Limits.RatePerSecond)
		rateHeaders(c, e.Plan, e.Limits, r.RetryAfter)
		return r.Write(c)
	}
	return m.reject(c, o)
}

// shadow counts what tenant id's shadow overrides would have refused of a
// request the engine admitted.
func (m *tenantMW) shadow(id string) {
	p := m.cfg.Plans
	e := p.Store.Resolve(id, "")
	if e.ShadowMask == 0 || p.Metrics == nil {
		return
	}
	if v, ok := e.HasShadow(plans.MaxConcurrentRequests); ok && v > 0 && float64(m.cfg.Requests.InFlightOf(id)) > v {
		p.Metrics.Shadow.WithLabelValues("request", e.Plan).Inc()
		p.onLimit(id, "request", true)
	}
	if p.ShadowRate != nil {
		_, okRate := e.HasShadow(plans.RatePerSecond)
		_, okBurst := e.HasShadow(plans.Burst)
		if okRate || okBurst {
			sp, o := p.ShadowRate.Admit(id, 1)
			sp.Release()
			if o == admission.RejectedRate {
				p.Metrics.Shadow.WithLabelValues("rate", e.Plan).Inc()
				p.onLimit(id, "rate", true)
			}
		}
	}
}
