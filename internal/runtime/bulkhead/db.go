package bulkhead

import (
	"errors"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
	"github.com/cellgate/cellgate/internal/plans"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

// DBPermits caps the database connections one tenant's requests hold at
// once (tenancy.max_db_connections): one permit per checkout, refused at
// once when the tenant is at its cap. It is an admission.Engine with only
// MaxConcurrent set, separate from the request engine so the two caps never
// share a gauge.
type DBPermits struct {
	engine     *admission.Engine
	rejections prometheus.Counter
	plans      PlanConfig
}

// NewDBPermits returns permits over engine, counting refusals in
// rejections (cellgate_tenant_bulkhead_rejections_total{kind="db"}; nil
// counts nothing).
func NewDBPermits(engine *admission.Engine, rejections prometheus.Counter) (*DBPermits, error) {
	if engine == nil {
		return nil, errors.New("bulkhead: NewDBPermits: engine is required")
	}
	return &DBPermits{engine: engine, rejections: rejections}, nil
}

// Engine returns the engine holding the per-tenant gauges.
func (d *DBPermits) Engine() *admission.Engine { return d.engine }

// DBBinding is one request's right to take database permits for its
// tenant: the shards.Permits of the request's accessor. It is live from
// Bind until End; afterwards Acquire takes nothing, so a goroutine that
// outlives the request is not counted (and not refused).
type DBBinding struct {
	permits *DBPermits
	tenant  string
	live    atomic.Bool
}

// Bind returns a live binding of d to tenantID. The caller ends it when
// the handler returns (Shard does both).
func (d *DBPermits) Bind(tenantID string) *DBBinding {
	b := &DBBinding{permits: d, tenant: tenantID}
	b.live.Store(true)
	return b
}

// Handler serves a tenant route: sh is the request's accessor to its
// tenant's shard, with the request's database permits.
type Handler = func(c echo.Context, sh shards.Accessor) error

// Shard returns the innermost step of a tenant route, after the request
// and server permits: it builds the request's accessor once — set's shard
// of the tenant the tenancy middleware found, its checkouts taking permits
// from a binding of d (nil d: not counted) — and hands it to h. The
// binding ends when h returns. A tenant whose slot another cell owns is
// answered ErrTenantOtherCell without calling h; any other accessor error
// (no tenant, a nil set) is left for h's checkouts to return.
func (d *DBPermits) Shard(set *shards.Set, h Handler) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, _ := tenant.From(c.Request().Context())
		var p shards.Permits
		if d != nil && id != "" {
			b := d.Bind(id)
			defer b.End()
			p = b
		}
		sh := set.Accessor(id, p)
		if errors.Is(sh.Err(), shards.ErrOtherCell) {
			return ErrTenantOtherCell.Write(c)
		}
		return h(c, sh)
	}
}

// End marks the request over. Permits already taken stay valid until
// released.
func (b *DBBinding) End() { b.live.Store(false) }

// Live reports whether the request is still in flight.
func (b *DBBinding) Live() bool { return b != nil && b.live.Load() }

// Acquire takes one database permit for the binding's tenant. It returns a
// held permit, or a zero one (Release is a no-op) when b is nil or no longer
// live, or ErrTenantDBOverloaded (ErrTenantCapacity when the engine's
// account table is full) without waiting. The caller releases the permit
// once, after giving the connection back.
func (b *DBBinding) Acquire() (admission.Permit, error) {
	if !b.Live() {
		return admission.Permit{}, nil
	}
	p, o := b.permits.engine.Admit(b.tenant, 1)
	pc := b.permits.plans
	if o == admission.Admitted {
		if pc.Store != nil && pc.Metrics != nil && pc.Store.Snapshot().HasShadows() {
			e := pc.Store.Resolve(b.tenant, "")
			if v, ok := e.HasShadow(plans.MaxDBConnections); ok && v > 0 && float64(b.permits.engine.InFlightOf(b.tenant)) > v {
				pc.Metrics.Shadow.WithLabelValues("db", e.Plan).Inc()
				pc.onLimit(b.tenant, "db", true)
			}
		}
		return p, nil
	}
	if b.permits.rejections != nil {
		b.permits.rejections.Inc()
	}
	if pc.Store != nil && pc.Metrics != nil {
		pc.Metrics.Refusals.WithLabelValues("db", pc.Store.Resolve(b.tenant, "").Plan).Inc()
		pc.onLimit(b.tenant, "db", false)
	}
	if o == admission.RejectedCapacity {
		return admission.Permit{}, ErrTenantCapacity
	}
	return admission.Permit{}, ErrTenantDBOverloaded
}

// WithPlans makes d count its refusals and shadow refusals per plan.
func (d *DBPermits) WithPlans(pc PlanConfig) { d.plans = pc }
