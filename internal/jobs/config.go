package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Defaults of Config. They live here and nowhere else.
const (
	// DefaultWorkers is Config.Workers when it is 0.
	DefaultWorkers = 4
	// DefaultLanesPerTenant is TenantConfig.LanesPerTenant when lanes are on
	// and it is 0 (capped at the lane count).
	DefaultLanesPerTenant = 2
	// DefaultRetryBackoffBase is Config.RetryBackoffBase when it is 0.
	DefaultRetryBackoffBase = time.Second
	// DefaultRetryBackoffMax is Config.RetryBackoffMax when it is 0.
	DefaultRetryBackoffMax = 10 * time.Minute
	// DefaultShutdownTimeout is Config.ShutdownTimeout when it is 0.
	DefaultShutdownTimeout = 10 * time.Second
)

// Config is the `jobs` block of the spec. The zero value is valid: 4 workers,
// no tenant isolation (each queue is FIFO), 1 s..10 min backoff, 10 s drain.
type Config struct {
	// Workers is the number of goroutines that run jobs (`jobs.workers`).
	// 0 means DefaultWorkers.
	Workers int `json:"workers"`
	// Tenants holds tenant isolation (`jobs.tenants`); off by default.
	Tenants TenantConfig `json:"tenants"`
	// RetryBackoffBase is the delay before the first retry; each retry doubles
	// it, up to RetryBackoffMax, and jitter picks a delay in [d/2, d).
	// 0 means DefaultRetryBackoffBase.
	RetryBackoffBase time.Duration `json:"retry_backoff_base"`
	// RetryBackoffMax caps the retry delay. 0 means DefaultRetryBackoffMax.
	RetryBackoffMax time.Duration `json:"retry_backoff_max"`
	// ShutdownTimeout bounds how long Stop waits for in-flight jobs when its
	// context has no earlier deadline. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration `json:"shutdown_timeout"`
	// Periodic are the jobs enqueued on a schedule (`jobs.periodic`),
	// checked against the registered kinds by NewClient. See PeriodicJob.
	Periodic []PeriodicJob `json:"periodic"`
}

// TenantConfig is `jobs.tenants`. Isolation (fair order, slots, lanes) is on
// when MaxConcurrent or Lanes is more than 0; with both at 0 each queue hands
// out jobs in enqueue order.
type TenantConfig struct {
	// MaxConcurrent caps the jobs of one tenant that run at the same time
	// (`jobs.tenants.max_concurrent`). 0 means no cap.
	MaxConcurrent int `json:"max_concurrent"`
	// Lanes is the number of shuffle-shard lanes (`jobs.tenants.lanes`); worker
	// i serves lane i % Lanes. 0 means lanes are off. More lanes than workers
	// is clamped to the worker count with a logged warning, so every lane has
	// a worker. At most MaxLanes.
	Lanes int `json:"lanes"`
	// LanesPerTenant is how many lanes serve each tenant
	// (`jobs.tenants.lanes_per_tenant`), 1..Lanes. 0 means
	// DefaultLanesPerTenant (or Lanes, if smaller).
	LanesPerTenant int `json:"lanes_per_tenant"`
}

// Isolated reports whether tenant isolation is on.
func (t TenantConfig) Isolated() bool { return t.MaxConcurrent > 0 || t.Lanes > 0 }

// WithDefaults returns c with every zero field that has a default filled in.
// It does not validate or clamp.
func (c Config) WithDefaults() Config {
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	if c.Tenants.Lanes > 0 && c.Tenants.LanesPerTenant == 0 {
		c.Tenants.LanesPerTenant = min(DefaultLanesPerTenant, c.Tenants.Lanes)
	}
	c.RetryBackoffBase = cmp.Or(c.RetryBackoffBase, DefaultRetryBackoffBase)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, DefaultRetryBackoffMax)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	return c
}

// Validate reports every invalid field of c (after defaults), each named by
// its spec path, joined with errors.Join. Lanes above Workers is not an error:
// Effective clamps it.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("jobs.workers: must be >= 1, got %d", c.Workers))
	}
	t := c.Tenants
	if t.MaxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("jobs.tenants.max_concurrent: must be >= 0, got %d", t.MaxConcurrent))
	}
	switch {
	case t.Lanes < 0:
		errs = append(errs, fmt.Errorf("jobs.tenants.lanes: must be >= 0, got %d", t.Lanes))
	case t.Lanes > MaxLanes:
		errs = append(errs, fmt.Errorf("jobs.tenants.lanes: must be <= %d, got %d", MaxLanes, t.Lanes))
	}
	switch {
	case t.LanesPerTenant < 0:
		errs = append(errs, fmt.Errorf("jobs.tenants.lanes_per_tenant: must be >= 0, got %d", t.LanesPerTenant))
	case t.Lanes > 0 && t.LanesPerTenant > t.Lanes:
		errs = append(errs, fmt.Errorf("jobs.tenants.lanes_per_tenant: must be <= jobs.tenants.lanes (%d), got %d", t.Lanes, t.LanesPerTenant))
	}
	if c.RetryBackoffBase < 0 {
		errs = append(errs, fmt.Errorf("jobs.retry_backoff_base: must be > 0, got %s", c.RetryBackoffBase))
	}
	if c.RetryBackoffMax < c.RetryBackoffBase {
		errs = append(errs, fmt.Errorf("jobs.retry_backoff_max: must be >= jobs.retry_backoff_base (%s), got %s", c.RetryBackoffBase, c.RetryBackoffMax))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("jobs.shutdown_timeout: must be > 0, got %s", c.ShutdownTimeout))
	}
	for _, p := range c.Periodic {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Effective returns the configuration the runtime actually uses: defaults
// applied, and lanes (and lanes per tenant) clamped to the worker count so each
// lane has a worker. warnings says what was clamped, for the caller to log.
// It returns Validate's error for an invalid c.
func (c Config) Effective() (eff Config, warnings []string, err error) {
	if err := c.Validate(); err != nil {
		return Config{}, nil, err
	}
	c = c.WithDefaults()
	if c.Tenants.Lanes > c.Workers {
		warnings = append(warnings, fmt.Sprintf(
			"jobs.tenants.lanes (%d) is more than jobs.workers (%d): using %d lanes so every lane has a worker",
			c.Tenants.Lanes, c.Workers, c.Workers))
		c.Tenants.Lanes = c.Workers
		if c.Tenants.LanesPerTenant > c.Tenants.Lanes {
			warnings = append(warnings, fmt.Sprintf(
				"jobs.tenants.lanes_per_tenant (%d) is more than the %d lanes in use: using %d",
				c.Tenants.LanesPerTenant, c.Tenants.Lanes, c.Tenants.Lanes))
			c.Tenants.LanesPerTenant = c.Tenants.Lanes
		}
	}
	return c, warnings, nil
}

// Backoff returns the delay before the retry that follows failed attempt
// number attempt (1-based): d = min(RetryBackoffMax, RetryBackoffBase ×
// 2^(attempt-1)), then "equal jitter" d/2 + jitter × d/2 with jitter in [0, 1)
// so that retries of jobs that failed together spread out yet the delay still
// grows. c must have its defaults applied.
func (c Config) Backoff(attempt int, jitter float64) time.Duration {
	d := c.RetryBackoffMax
	if attempt < 1 {
		attempt = 1
	}
	if shift := attempt - 1; shift < 62 {
		if b := c.RetryBackoffBase << shift; b > 0 && b>>shift == c.RetryBackoffBase && b < d {
			d = b
		}
	}
	half := d / 2
	return half + time.Duration(jitter*float64(d-half))
}
