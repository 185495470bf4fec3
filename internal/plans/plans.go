package plans

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
)

// Limits are one tenant's limits; 0 means no limit (Weight is at least 1).
type Limits struct {
	// MaxConcurrentRequests is the tenant's in-flight request cap.
	MaxConcurrentRequests int `json:"max_concurrent_requests"`
	// MaxDBConnections is the tenant's database permit cap.
	MaxDBConnections int `json:"max_db_connections"`
	// RatePerSecond is the tenant's request rate.
	RatePerSecond float64 `json:"rate_per_second"`
	// Burst is the tenant's rate bucket size.
	Burst int `json:"burst"`
	// JobsMaxConcurrent is the tenant's running-job cap per jobs database.
	JobsMaxConcurrent int `json:"jobs.max_concurrent"`
	// JobsWeight is the tenant's share of job claims.
	JobsWeight int `json:"jobs.weight"`
}

// Field names one overridable limit, as the table, the CLI and messages
// spell it.
type Field string

// The overridable fields.
const (
	MaxConcurrentRequests Field = "max_concurrent_requests"
	MaxDBConnections      Field = "max_db_connections"
	RatePerSecond         Field = "rate_per_second"
	Burst                 Field = "burst"
	JobsMaxConcurrent     Field = "jobs.max_concurrent"
	JobsWeight            Field = "jobs.weight"
)

// Fields lists every overridable field in a fixed order.
func Fields() []Field {
	return []Field{MaxConcurrentRequests, MaxDBConnections, RatePerSecond, Burst, JobsMaxConcurrent, JobsWeight}
}

// ParseField returns the field named s, or an error listing the fields.
func ParseField(s string) (Field, error) {
	for _, f := range Fields() {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, 0, len(Fields()))
	for _, f := range Fields() {
		names = append(names, string(f))
	}
	return "", fmt.Errorf("unknown limit %q; one of %s", s, strings.Join(names, ", "))
}

// Check returns an error naming f when v is not a legal value for it.
func (f Field) Check(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%s: must be a finite number >= 0, got %v", f, v)
	}
	if f != RatePerSecond && v != math.Trunc(v) {
		return fmt.Errorf("%s: must be a whole number, got %v", f, v)
	}
	switch f {
	case JobsWeight:
		if v < 1 || v > 1000 {
			return fmt.Errorf("%s: must be from 1 to 1000, got %v", f, v)
		}
	case MaxConcurrentRequests, MaxDBConnections, Burst, JobsMaxConcurrent:
		if v > 1<<31-1 {
			return fmt.Errorf("%s: must be at most %d, got %v", f, 1<<31-1, v)
		}
	}
	return nil
}

// get returns field f of l.
func (l Limits) get(f Field) float64 {
	switch f {
	case MaxConcurrentRequests:
		return float64(l.MaxConcurrentRequests)
	case MaxDBConnections:
		return float64(l.MaxDBConnections)
	case RatePerSecond:
		return l.RatePerSecond
	case Burst:
		return float64(l.Burst)
	case JobsMaxConcurrent:
		return float64(l.JobsMaxConcurrent)
	case JobsWeight:
		return float64(l.JobsWeight)
	}
	return 0
}

// set sets field f of l to v (checked by Field.Check).
func (l *Limits) set(f Field, v float64) {
	switch f {
	case MaxConcurrentRequests:
		l.MaxConcurrentRequests = int(v)
	case MaxDBConnections:
		l.MaxDBConnections = int(v)
	case RatePerSecond:
		l.RatePerSecond = v
	case Burst:
		l.Burst = int(v)
	case JobsMaxConcurrent:
		l.JobsMaxConcurrent = int(v)
	case JobsWeight:
		l.JobsWeight = int(v)
	}
}

// Get returns field f of l.
func (l Limits) Get(f Field) float64 { return l.get(f) }

// Override replaces one field of a tenant's plan. Enforce false is shadow
// mode: the plan's value stays in force and would-be refusals at Value are
// only counted.
type Override struct {
	// Value is the overriding limit.
	Value float64 `json:"value"`
	// Enforce false keeps the plan's value in force (shadow mode).
	Enforce bool `json:"enforce"`
}

// Effective is a tenant's resolved limits.
type Effective struct {
	// Plan is the tenant's plan (the metrics' plan label).
	Plan string
	// Limits are the limits in force.
	Limits Limits
	// Shadow holds the shadow overrides' values; a field counts only when
	// its bit is set in ShadowMask.
	Shadow Limits
	// ShadowMask has bit i set when Fields()[i] has a shadow override.
	ShadowMask uint8
	// Overridden has bit i set when Fields()[i] has an enforced override.
	Overridden uint8
}

// HasShadow reports whether f has a shadow override, and its value.
func (e Effective) HasShadow(f Field) (float64, bool) {
	i := fieldIndex(f)
	if e.ShadowMask&(1<<i) == 0 {
		return 0, false
	}
	return e.Shadow.get(f), true
}

func fieldIndex(f Field) int {
	for i, g := range Fields() {
		if g == f {
			return i
		}
	}
	return -1
}

// Catalog is the spec's plans.
type Catalog struct {
	plans  []Limits
	names  []string
	byName map[string]int
	def    int
}

// NewCatalog builds the catalog of cfg's effective plans (tenancy.plans,
// or the implicit plan of the top-level fields). It returns an error naming
// the bad plan or default_plan.
func NewCatalog(cfg config.Config) (*Catalog, error) {
	ps, def := cfg.EffectivePlans()
	c := &Catalog{byName: make(map[string]int, len(ps)), def: -1}
	for i, p := range ps {
		path := fmt.Sprintf("tenancy.plans[%d]", i)
		if p.Name == "" {
			return nil, fmt.Errorf("%s.name: empty", path)
		}
		if _, dup := c.byName[p.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is used twice", path, p.Name)
		}
		l := Limits{
			MaxConcurrentRequests: p.MaxConcurrentRequests,
			MaxDBConnections:      p.MaxDBConnections,
			RatePerSecond:         p.RatePerSecond,
			Burst:                 p.Burst,
			JobsMaxConcurrent:     p.Jobs.MaxConcurrent,
			JobsWeight:            max(p.Jobs.Weight, 1),
		}
		for _, f := range Fields() {
			if err := f.Check(l.get(f)); err != nil {
				return nil, fmt.Errorf("%s (%s).%w", path, p.Name, err)
			}
		}
		if l.RatePerSecond > 0 && l.Burst < 1 {
			return nil, fmt.Errorf("%s (%s).burst: must be >= 1 when rate_per_second is set, got %d", path, p.Name, l.Burst)
		}
		c.byName[p.Name] = len(c.plans)
		c.plans = append(c.plans, l)
		c.names = append(c.names, p.Name)
	}
	i, ok := c.byName[def]
	if !ok {
		return nil, fmt.Errorf("tenancy.default_plan: %q is not one of tenancy.plans' names (%s)", def, strings.Join(c.names, ", "))
	}
	c.def = i
	return c, nil
}

// Names returns the plans' names in spec order.
func (c *Catalog) Names() []string { return append([]string(nil), c.names...) }

// Default returns the default plan's name.
func (c *Catalog) Default() string { return c.names[c.def] }

// Plan returns the limits of the plan called name.
func (c *Catalog) Plan(name string) (Limits, bool) {
	i, ok := c.byName[name]
	if !ok {
		return Limits{}, false
	}
	return c.plans[i], true
}

// Max returns, per field, the largest value any plan sets; a plan without
// a limit (0) does not count, so callers treat 0 as "no plan limits it".
func (c *Catalog) Max() Limits {
	var m Limits
	for _, p := range c.plans {
		for _, f := range Fields() {
			m.set(f, math.Max(m.get(f), p.get(f)))
		}
	}
	return m
}

// CheckPlan returns an error naming the plans when name is not one.
func (c *Catalog) CheckPlan(name string) error {
	if _, ok := c.byName[name]; !ok {
		return fmt.Errorf("plan %q is not in the spec; one of %s", name, strings.Join(c.names, ", "))
	}
	return nil
}

// Row is one tenant's row of the tenant table.
type Row struct {
	// Tenant is the tenant id.
	Tenant string `json:"tenant"`
	// Plan is the tenant's plan ("" = none; the claim or default decides).
	Plan string `json:"plan,omitempty"`
	// Overrides replace fields of the plan.
	Overrides map[Field]Override `json:"overrides,omitempty"`
	// UpdatedBy names who last changed the row.
	UpdatedBy string `json:"updated_by"`
	// UpdatedAt is when.
	UpdatedAt string `json:"updated_at"`
}

// resolved is a tenant row prepared for Resolve: its overrides as masks and
// values, so resolving allocates nothing.
type resolved struct {
	plan     int // catalog index, -1: none or unknown
	override Limits
	enforced uint8
	shadow   uint8
}

// Snapshot is one immutable view of the tenant table over a catalog.
type Snapshot struct {
	cat     *Catalog
	tenants map[string]resolved
	claims  map[string]int
	rows    []Row
	version int64
	shadows bool
}

// HasShadows reports whether any tenant has a shadow override, so the
// request path skips shadow accounting entirely when none does.
func (s *Snapshot) HasShadows() bool { return s.shadows }

// NewSnapshot builds a snapshot of rows over cat. A row naming a plan the
// spec no longer has resolves as if it named none (the error list says
// which).
func NewSnapshot(cat *Catalog, rows []Row, version int64) (*Snapshot, []error) {
	s := &Snapshot{cat: cat, tenants: make(map[string]resolved, len(rows)), version: version}
	var errs []error
	for _, r := range rows {
		rv := resolved{plan: -1}
		if r.Plan != "" {
			if i, ok := cat.byName[r.Plan]; ok {
				rv.plan = i
			} else {
				errs = append(errs, fmt.Errorf("tenant %q: plan %q is not in the spec; it gets the default plan", r.Tenant, r.Plan))
			}
		}
		for f, o := range r.Overrides {
			i := fieldIndex(f)
			if i < 0 || f.Check(o.Value) != nil {
				errs = append(errs, fmt.Errorf("tenant %q: override %s=%v ignored", r.Tenant, f, o.Value))
				continue
			}
			rv.override.set(f, o.Value)
			if o.Enforce {
				rv.enforced |= 1 << i
			} else {
				rv.shadow |= 1 << i
			}
		}
		s.tenants[r.Tenant] = rv
		if rv.shadow != 0 {
			s.shadows = true
		}
	}
	s.rows = rows
	return s, errs
}

// Catalog returns the snapshot's catalog.
func (s *Snapshot) Catalog() *Catalog { return s.cat }

// Version is the table's version the snapshot was read at.
func (s *Snapshot) Version() int64 { return s.version }

// Rows returns the table's rows, sorted by tenant; callers must not modify
// them.
func (s *Snapshot) Rows() []Row { return s.rows }

// Row returns tenant's row.
func (s *Snapshot) Row(tenant string) (Row, bool) {
	i := sort.Search(len(s.rows), func(i int) bool { return s.rows[i].Tenant >= tenant })
	if i < len(s.rows) && s.rows[i].Tenant == tenant {
		return s.rows[i], true
	}
	return Row{}, false
}

// Resolve returns tenant's limits. claim is the plan an authenticated
// token names ("" = none); the caller passes it only from a verified token,
// never from anything the client chooses. Precedence: override > claim >
// table > default plan. A claim naming no plan of the spec is ignored.
// Resolve takes no lock and allocates nothing.
func (s *Snapshot) Resolve(tenant, claim string) Effective {
	c := s.cat
	plan := c.def
	r, ok := s.tenants[tenant]
	if ok && r.plan >= 0 {
		plan = r.plan
	}
	if claim != "" {
		if i, ok := c.byName[claim]; ok {
			plan = i
		}
	} else if i, ok := s.claims[tenant]; ok {
		plan = i
	}
	e := Effective{Plan: c.names[plan], Limits: c.plans[plan]}
	if !ok || r.enforced|r.shadow == 0 {
		return e
	}
	for i, f := range Fields() {
		bit := uint8(1) << i
		switch {
		case r.enforced&bit != 0:
			e.Limits.set(f, r.override.get(f))
		case r.shadow&bit != 0:
			e.Shadow.set(f, r.override.get(f))
		}
	}
	e.ShadowMask, e.Overridden = r.shadow, r.enforced
	return e
}

// Source is where a tenant's plan comes from.
type Source string

// The sources of a plan, strongest first (an override replaces one field,
// not the plan: Effective.Overridden says which).
const (
	// SourceClaim: a verified token named the plan (Store.ObserveClaim).
	SourceClaim Source = "claim"
	// SourceTable: the tenant's row in the tenant table names it.
	SourceTable Source = "table"
	// SourceDefault: nothing names one; the spec's default_plan applies.
	SourceDefault Source = "default"
)

// PlanSource says where Resolve(tenant, "") takes tenant's plan from: a
// plan claim this process has seen, the tenant table, or the default.
func (s *Snapshot) PlanSource(tenant string) Source {
	if _, ok := s.claims[tenant]; ok {
		return SourceClaim
	}
	if r, ok := s.tenants[tenant]; ok && r.plan >= 0 {
		return SourceTable
	}
	return SourceDefault
}

// withClaims returns a copy of s that resolves tenants without a claim of
// their own to the plans in claims (tenant → catalog index).
func (s *Snapshot) withClaims(claims map[string]int) *Snapshot {
	n := *s
	n.claims = claims
	return &n
}
