package jobs

// TenantLimits is the source of per-tenant job limits that both job
// backends read: how many of a tenant's jobs may run at once and its share
// of the fair order. Limits may change at runtime (a plan store swapped in
// for UniformLimits, say); backends read them again rather than keeping
// them forever: the local backend on every claim and release, the
// PostgreSQL backend on a tenant's enqueues and once a second for every
// tenant (docs/jobs.md says how fast a change applies). Implementations
// must be safe for concurrent use and cheap: they are called on hot paths.
type TenantLimits interface {
	// JobLimits returns tenant's cap on running jobs (0 = no cap) and its
	// weight in the fair order (≥ 1: a tenant of weight 4 gets four claims
	// for each claim of a tenant of weight 1 while both have jobs waiting).
	// It is not called for jobs without a tenant, which are never capped.
	JobLimits(tenant string) (maxRunning, weight int)
}

// UniformLimits is the TenantLimits of a spec without plans: every tenant
// has the same cap, `jobs.tenants.max_concurrent`, and weight 1.
type UniformLimits struct {
	// MaxRunning is every tenant's cap on running jobs; 0 means no cap.
	MaxRunning int
}

// JobLimits returns (l.MaxRunning, 1) for every tenant.
func (l UniformLimits) JobLimits(string) (maxRunning, weight int) { return l.MaxRunning, 1 }

// MaxWeight bounds the weights backends honour: a larger weight from a
// TenantLimits counts as MaxWeight (the spec's plans allow 1..1000).
const MaxWeight = 1000

// NormalizeLimits clamps what a TenantLimits returned into the range the
// backends use: a negative cap is no cap, a weight below 1 is 1 and one
// above MaxWeight is MaxWeight.
func NormalizeLimits(maxRunning, weight int) (int, int) {
	return max(maxRunning, 0), min(max(weight, 1), MaxWeight)
}

// Priorities, as River's: 1 runs first, 4 last. Priority orders a
// tenant's own waiting jobs; it never lets one tenant's jobs take another
// tenant's turn (weights decide between tenants).
const (
	// PriorityHighest is the first priority, and the default.
	PriorityHighest = 1
	// PriorityLowest is the last priority.
	PriorityLowest = 4
)

// WithPriority sets the job's priority (1..4, 1 first), overriding its
// kind's. Enqueue refuses another value.
func WithPriority(p int) EnqueueOption {
	return func(o *enqueueOptions) { o.priority = p }
}
