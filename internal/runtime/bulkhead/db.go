package bulkhead

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/admission"
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

type dbKey struct{}

// DBBinding is one request's right to take database permits for its
// tenant. It is live from Bind until End; afterwards Acquire takes nothing,
// so a goroutine that outlives the request is not counted (and not
// refused).
type DBBinding struct {
	permits *DBPermits
	tenant  string
	live    atomic.Bool
}

// Bind returns ctx carrying a live binding of d to tenant, and the binding.
// The Tenant middleware calls it for each admitted request and calls End
// when the handler returns; other request-shaped callers do the same. When
// ctx is the server's request scope (tenant.Scope) the binding is attached
// to it and ctx itself is returned, so the request is not copied again.
func (d *DBPermits) Bind(ctx context.Context, tenantID string) (context.Context, *DBBinding) {
	b := &DBBinding{permits: d, tenant: tenantID}
	b.live.Store(true)
	if s, ok := tenant.ScopeOf(ctx); ok && s.Attach(dbKey{}, b) {
		return ctx, b
	}
	return context.WithValue(ctx, dbKey{}, b), b
}

// DBBindingFrom returns the binding the request's context carries, or nil.
func DBBindingFrom(ctx context.Context) *DBBinding {
	b, _ := ctx.Value(dbKey{}).(*DBBinding)
	return b
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
	if o == admission.Admitted {
		return p, nil
	}
	if b.permits.rejections != nil {
		b.permits.rejections.Inc()
	}
	if o == admission.RejectedCapacity {
		return admission.Permit{}, ErrTenantCapacity
	}
	return admission.Permit{}, ErrTenantDBOverloaded
}
