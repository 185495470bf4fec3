package runtime

import (
	"fmt"
	"math"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/admission/admissionmetrics"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
)

// Bulkheads are a server's admission state: the per-tenant engines and the
// server-wide limiter. Leak tests read their in-flight counts; the admin
// endpoint reports them.
type Bulkheads struct {
	// Requests admits tenant requests (tenancy.max_concurrent_requests,
	// rate_per_second/burst, admission.funding). nil when all are off.
	Requests *admission.Engine
	// DB holds the per-tenant database permits (tenancy.max_db_connections).
	// nil when off.
	DB *admission.Engine
	// Server is the server-wide limit (server.max_concurrent_requests); it
	// always counts, so its InFlight is the server's in-flight gauge.
	Server *bulkhead.Limiter

	// dbPermits binds DB to each tenant request's shard accessor; nil
	// when DB is.
	dbPermits *bulkhead.DBPermits
	// shadow checks shadow rate overrides (plans only).
	shadow *admission.Engine
	// plan counts refusals and shadow refusals by plan (plans only).
	plan *bulkhead.PlanMetrics
}

// InFlight sums every permit held now: tenant requests, database
// checkouts and server admissions. A drained server reads 0.
func (b Bulkheads) InFlight() int64 {
	n := b.Server.InFlight()
	if b.Requests != nil {
		n += b.Requests.InFlight()
	}
	if b.DB != nil {
		n += b.DB.InFlight()
	}
	return n
}

// close releases the engines' clock.
func (b Bulkheads) close() {
	if b.Requests != nil {
		b.Requests.Close()
	}
	if b.DB != nil {
		b.DB.Close()
	}
	if b.shadow != nil {
		b.shadow.Close()
	}
}

// engineConfig maps the spec's admission block onto the engine's config;
// zero fields (a hand-built config) keep the engine's defaults.
func engineConfig(a config.Admission) admission.Config {
	c := admission.DefaultConfig()
	if a.Shards > 0 {
		c.Shards = a.Shards
	}
	if a.LeaseSize > 0 {
		c.LeaseSize = a.LeaseSize
	}
	if a.MaxAccounts > 0 {
		c.MaxAccounts = a.MaxAccounts
	}
	if a.IdleAfter > 0 {
		c.IdleAfter = a.IdleAfter.D()
	}
	return c
}

// validateCaps checks the spec fields the bulkheads read and names them.
func validateCaps(cfg config.Config) error {
	t := cfg.Tenancy
	switch {
	case cfg.Server.MaxConcurrentRequests < 0:
		return fmt.Errorf("server.max_concurrent_requests: must be >= 0 (0 = none), got %d", cfg.Server.MaxConcurrentRequests)
	case t.MaxConcurrentRequests < 0:
		return fmt.Errorf("tenancy.max_concurrent_requests: must be >= 0 (0 = none), got %d", t.MaxConcurrentRequests)
	case t.MaxDBConnections < 0:
		return fmt.Errorf("tenancy.max_db_connections: must be >= 0 (0 = none), got %d", t.MaxDBConnections)
	case math.IsNaN(t.RatePerSecond) || math.IsInf(t.RatePerSecond, 0) || t.RatePerSecond < 0:
		return fmt.Errorf("tenancy.rate_per_second: must be a finite number >= 0, got %v", t.RatePerSecond)
	case t.RatePerSecond > 0 && t.Burst < 1:
		return fmt.Errorf("tenancy.burst: must be >= 1 when tenancy.rate_per_second is set, got %d", t.Burst)
	case cfg.Admission.Funding < 0:
		return fmt.Errorf("admission.funding: must be >= 0 (0 = unlimited), got %d", cfg.Admission.Funding)
	case cfg.Admission.OverageAllowance < 0:
		return fmt.Errorf("admission.overage_allowance: must be >= 0, got %d", cfg.Admission.OverageAllowance)
	}
	return nil
}

// buildBulkheads builds the engines, the limiter and their metrics, and
// returns the middlewares that follow tenancy on tenant routes: tenant
// bulkhead (when tenancy is on and a per-tenant request limit is set), then
// server admission. The database permits are bound later, by the step that
// builds the request's shard accessor (Server.Tenant). skip selects the public paths, which are never counted;
// onReject (may be nil) hears the tenant of every tenant-bulkhead refusal;
// onLimit (may be nil; plans only) every plan refusal and shadow refusal
// with its tenant and resource (bulkhead.PlanConfig.OnLimit).
//
// With store, the engines take each tenant's limits from its plan and
// overrides (admission.Config.Limits), refresh them on every change the
// store publishes, and exist whenever tenancy is on, so that a tenant table
// change from "no limit" to a cap needs no restart.
func buildBulkheads(cfg config.Config, reg prometheus.Registerer, skip middleware.Skipper, onReject func(string), onLimit func(string, string, bool), store *plans.Store) (Bulkheads, []echo.MiddlewareFunc, error) {
	var b Bulkheads
	if err := validateCaps(cfg); err != nil {
		return b, nil, err
	}
	var err error
	if b.Server, err = bulkhead.NewLimiter(cfg.Server.MaxConcurrentRequests); err != nil {
		return b, nil, fmt.Errorf("server.max_concurrent_requests: %w", err)
	}
	m, err := bulkhead.NewMetrics(reg, b.Server)
	if err != nil {
		return b, nil, fmt.Errorf("bulkhead metrics: %w", err)
	}
	t := cfg.Tenancy
	planned := store != nil && t.Enabled
	if planned || t.Enabled && (t.MaxConcurrentRequests > 0 || t.RatePerSecond > 0 || cfg.Admission.Funding > 0) {
		ec := engineConfig(cfg.Admission)
		ec.MaxConcurrent = int64(t.MaxConcurrentRequests)
		ec.Rate = t.RatePerSecond
		if ec.Rate > 0 {
			ec.Burst = int64(t.Burst)
		}
		if planned {
			ec.Limits = bulkhead.RequestLimits{Store: store}
		}
		ec.Funding = cfg.Admission.Funding
		ec.OverageAllowance = cfg.Admission.OverageAllowance
		if b.Requests, err = admission.New(ec); err != nil {
			return b, nil, fmt.Errorf("tenancy/admission: %w", err)
		}
		if err := reg.Register(admissionmetrics.New(b.Requests, "request")); err != nil {
			b.close()
			return b, nil, err
		}
	}
	if planned || t.Enabled && t.MaxDBConnections > 0 {
		ec := engineConfig(cfg.Admission)
		ec.MaxConcurrent = int64(t.MaxDBConnections)
		if planned {
			ec.Limits = bulkhead.DBLimits{Store: store}
		}
		if b.DB, err = admission.New(ec); err != nil {
			b.close()
			return b, nil, fmt.Errorf("tenancy.max_db_connections: %w", err)
		}
		if err := reg.Register(admissionmetrics.New(b.DB, "db")); err != nil {
			b.close()
			return b, nil, err
		}
		b.dbPermits, _ = bulkhead.NewDBPermits(b.DB, m.DBRejections) // engine is non-nil
	}
	var pc bulkhead.PlanConfig
	if planned {
		pm, err := bulkhead.NewPlanMetrics(reg)
		if err != nil {
			b.close()
			return b, nil, err
		}
		shadow, err := bulkhead.NewShadowRateEngine(store, engineConfig(cfg.Admission))
		if err != nil {
			b.close()
			return b, nil, err
		}
		b.shadow, b.plan = shadow, pm
		if b.dbPermits != nil {
			b.dbPermits.WithPlans(bulkhead.PlanConfig{Store: store, Metrics: pm, OnLimit: onLimit})
		}
		pc = bulkhead.PlanConfig{Store: store, Metrics: pm, ShadowRate: shadow, OnLimit: onLimit}
		req, db := b.Requests, b.DB
		store.Watch(func(*plans.Snapshot) {
			req.Refresh()
			db.Refresh()
			shadow.Refresh()
		})
	}
	var mws []echo.MiddlewareFunc
	if b.Requests != nil {
		mw, err := bulkhead.TenantWithConfig(bulkhead.TenantConfig{
			Skipper:    skip,
			Requests:   b.Requests,
			Rejections: m.RequestRejections,
			OnReject:   onReject,
			Plans:      pc,
		})
		if err != nil {
			b.close()
			return b, nil, err
		}
		mws = append(mws, mw)
	}
	mw, err := bulkhead.AdmissionWithConfig(bulkhead.AdmissionConfig{
		Skipper:    skip,
		Limiter:    b.Server,
		Rejections: m.ServerRejections,
	})
	if err != nil {
		b.close()
		return b, nil, err
	}
	return b, append(mws, mw), nil
}
