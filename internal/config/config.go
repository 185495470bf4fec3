// Package config holds the typed form of a cellgate spec: the Go mirror of
// schema/cellgate.cue, field for field, with the same JSON names so the same
// Rego policy reads the generator's export and the server's final config.
//
// The generator renders the spec's values as a Go literal of Config (gen/);
// the server starts from that literal, overlays an optional per-cell JSON
// file and then the environment (see configload.Load). Values are plain data: a Config
// is safe to read from many goroutines once loaded and must not be mutated
// after the server starts.
package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Config is a whole service spec. Field docs live in schema/cellgate.cue,
// the single place where defaults and ranges are declared.
type Config struct {
	Service   Service   `json:"service"`
	Server    Server    `json:"server"`
	Tenancy   Tenancy   `json:"tenancy"`
	Admission Admission `json:"admission"`
	Router    Router    `json:"router"`
	Console   Console   `json:"console"`
	Jobs      Jobs      `json:"jobs"`
	Database  Database  `json:"database"`
	Cells     []Cell    `json:"cells"`
	Routes    []Route   `json:"routes"`
	Deploy    Deploy    `json:"deploy"`
	// Settings are the service's own settings (#Settings in
	// schema/settings.cue) as decoded JSON: CUE checks their shape, and
	// gen/settings decodes them into the service's typed Settings.
	Settings map[string]any `json:"settings"`
}

// Service names the generated service.
type Service struct {
	// Name appears in logs.
	Name string `json:"name"`
}

// Server holds the HTTP server's settings of one cell.
type Server struct {
	// Address is the listen address, for example ":8080".
	Address string `json:"address"`
	// MaxConcurrentRequests caps in-flight requests server-wide (0 = none).
	MaxConcurrentRequests int `json:"max_concurrent_requests"`
	// ReadHeaderTimeout bounds reading a request's head from its first byte,
	// never extended (slow-loris guard).
	ReadHeaderTimeout Duration `json:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request.
	ReadTimeout Duration `json:"read_timeout"`
	// BodyReadTimeout bounds reading a request body from the end of its head
	// (0 = only ReadTimeout).
	BodyReadTimeout Duration `json:"body_read_timeout"`
	// BodyMinBytesPerSecond is the slowest a body may arrive after
	// BodyRateGrace, counting only time spent waiting for it (0 = none).
	BodyMinBytesPerSecond int64 `json:"body_min_bytes_per_second"`
	// BodyRateGrace is how long a body may take before the minimum rate
	// applies.
	BodyRateGrace Duration `json:"body_rate_grace"`
	// WriteTimeout bounds writing a response (0 = none, for streams).
	WriteTimeout Duration `json:"write_timeout"`
	// IdleTimeout bounds idle keep-alive connections.
	IdleTimeout Duration `json:"idle_timeout"`
	// RequestTimeout cancels a handler's context after this long (0 = none).
	RequestTimeout Duration `json:"request_timeout"`
	// ShutdownTimeout is the drain deadline after SIGTERM.
	ShutdownTimeout Duration `json:"shutdown_timeout"`
	// BodyLimitBytes caps a request body.
	BodyLimitBytes int64 `json:"body_limit_bytes"`
	// Cell names the cell this process serves; "" means the only cell.
	Cell string `json:"cell"`
	// AdminTokenEnv names the env var holding the /admin bearer token.
	AdminTokenEnv string `json:"admin_token_env"`
	// OperatorTokenEnv names the env var holding the console's operator
	// token, which may also act on jobs; the admin token only reads.
	OperatorTokenEnv string `json:"operator_token_env"`
	// Idempotency governs the Idempotency-Key records of idempotent routes.
	Idempotency Idempotency `json:"idempotency"`
}

// Idempotency governs the Idempotency-Key records of the routes marked
// idempotent.
type Idempotency struct {
	// TTL is how long a key's stored answer is replayed before the sweep
	// deletes it.
	TTL Duration `json:"ttl"`
	// Lease is how long a request holds its key in progress before a retry
	// may take it over; longer than RequestTimeout.
	Lease Duration `json:"lease"`
	// SweepInterval is how often each process deletes expired keys.
	SweepInterval Duration `json:"sweep_interval"`
}

// IdempotentRoutes reports whether any route is marked idempotent: the
// idempotency table is then migrated on every shard and swept.
func (c Config) IdempotentRoutes() bool {
	for _, r := range c.Routes {
		if r.Idempotent {
			return true
		}
	}
	return false
}

// Tenancy says where a request's tenant comes from and what it may use.
type Tenancy struct {
	// Enabled turns tenant extraction on for tenant routes.
	Enabled bool `json:"enabled"`
	// Source is "header", "subdomain", "session" or "jwt".
	Source string `json:"source"`
	// Header configures the header source.
	Header HeaderSource `json:"header"`
	// Subdomain configures the subdomain source.
	Subdomain SubdomainSource `json:"subdomain"`
	// Session configures the signed-cookie source.
	Session SessionSource `json:"session"`
	// JWT configures the bearer-token source.
	JWT JWTSource `json:"jwt"`
	// MaxIDBytes caps a tenant id's length.
	MaxIDBytes int `json:"max_id_bytes"`
	// MaxConcurrentRequests per tenant (0 = none).
	MaxConcurrentRequests int `json:"max_concurrent_requests"`
	// MaxDBConnections per tenant (0 = none).
	MaxDBConnections int `json:"max_db_connections"`
	// RatePerSecond per tenant (0 = none).
	RatePerSecond float64 `json:"rate_per_second"`
	// Burst of the per-tenant rate limit.
	Burst int `json:"burst"`
	// PublicPaths skip tenancy and are never counted.
	PublicPaths []string `json:"public_paths"`
	// Plans are tiers of per-tenant limits (docs/plans.md); empty means
	// the four per-tenant fields above form the implicit plan "default".
	Plans []Plan `json:"plans"`
	// DefaultPlan is the plan of a tenant nothing else names.
	DefaultPlan string `json:"default_plan"`
}

// Plan is one tier of per-tenant limits; 0 means no limit.
type Plan struct {
	// Name identifies the plan in the tenant table, tokens and metrics.
	Name string `json:"name"`
	// MaxConcurrentRequests per tenant (0 = none).
	MaxConcurrentRequests int `json:"max_concurrent_requests"`
	// MaxDBConnections per tenant (0 = none).
	MaxDBConnections int `json:"max_db_connections"`
	// RatePerSecond per tenant (0 = none).
	RatePerSecond float64 `json:"rate_per_second"`
	// Burst of the per-tenant rate limit.
	Burst int `json:"burst"`
	// Jobs are the plan's job limits.
	Jobs PlanJobs `json:"jobs"`
}

// PlanJobs are a plan's job limits.
type PlanJobs struct {
	// MaxConcurrent jobs of one tenant running at once (0 = none).
	MaxConcurrent int `json:"max_concurrent"`
	// Weight is the tenant's share of claims while tenants are backlogged
	// (1-1000).
	Weight int `json:"weight"`
}

// ImplicitPlan is the name of the one plan a spec without tenancy.plans
// has: the top-level per-tenant fields.
const ImplicitPlan = "default"

// EffectivePlans returns the plans tenants can be on and the default plan's
// name: tenancy.plans and tenancy.default_plan when plans are given, else
// one plan "default" made of the top-level per-tenant fields and
// jobs.tenants.max_concurrent with weight 1.
func (c Config) EffectivePlans() ([]Plan, string) {
	if len(c.Tenancy.Plans) > 0 {
		return c.Tenancy.Plans, c.Tenancy.DefaultPlan
	}
	t := c.Tenancy
	return []Plan{{
		Name:                  ImplicitPlan,
		MaxConcurrentRequests: t.MaxConcurrentRequests,
		MaxDBConnections:      t.MaxDBConnections,
		RatePerSecond:         t.RatePerSecond,
		Burst:                 t.Burst,
		Jobs:                  PlanJobs{MaxConcurrent: c.Jobs.Tenants.MaxConcurrent, Weight: 1},
	}}, ImplicitPlan
}

// HeaderSource reads the tenant from a request header.
type HeaderSource struct {
	// Name of the header.
	Name string `json:"name"`
}

// SubdomainSource reads the tenant from the first label of the host.
type SubdomainSource struct {
	// BaseDomain: "acme.<BaseDomain>" is tenant "acme".
	BaseDomain string `json:"base_domain"`
}

// SessionSource reads the tenant from an HMAC-signed cookie.
type SessionSource struct {
	// Cookie is the cookie's name.
	Cookie string `json:"cookie"`
	// KeyEnv names the env var holding the HMAC key.
	KeyEnv string `json:"key_env"`
}

// JWTSource reads the tenant from a verified bearer token's claim. Exactly
// one of JWKSURL, JWKSFile, KeyFile and KeyEnv names the keys.
type JWTSource struct {
	// Algorithms the server accepts.
	Algorithms []string `json:"algorithms"`
	// KeyEnv names the env var holding the key.
	KeyEnv string `json:"key_env"`
	// KeyFile names a file holding the key.
	KeyFile string `json:"key_file"`
	// JWKSFile names a JWKS file read at boot; tokens select its keys by
	// kid.
	JWKSFile string `json:"jwks_file"`
	// JWKSURL is the identity provider's JWKS URL, fetched at boot, every
	// JWKSRefresh and on an unknown kid.
	JWKSURL string `json:"jwks_url"`
	// JWKSRefresh is how often JWKSURL is fetched on schedule.
	JWKSRefresh Duration `json:"jwks_refresh"`
	// JWKSUnknownKIDInterval is the least time between two fetches of
	// JWKSURL that unknown kids cause.
	JWKSUnknownKIDInterval Duration `json:"jwks_unknown_kid_interval"`
	// JWKSTimeout bounds one fetch of JWKSURL.
	JWKSTimeout Duration `json:"jwks_timeout"`
	// Issuer, when set, must equal a token's iss.
	Issuer string `json:"issuer"`
	// Audience, when set, must be one of a token's aud values.
	Audience string `json:"audience"`
	// Claim holds the tenant id.
	Claim string `json:"claim"`
	// Leeway tolerated on exp, nbf and iat.
	Leeway Duration `json:"leeway"`
	// PlanClaim, when set, names the verified token's claim that holds the
	// tenant's plan.
	PlanClaim string `json:"plan_claim"`
}

// Admission configures the per-tenant admission engine.
type Admission struct {
	// Shards of per-account state: 1 or a power of two.
	Shards int `json:"shards"`
	// LeaseSize is the chunk a shard takes from a funding line at once.
	LeaseSize int64 `json:"lease_size"`
	// OverageAllowance is how many units may pass an empty line.
	OverageAllowance int64 `json:"overage_allowance"`
	// Funding is each account's initial line (0 = unlimited).
	Funding int64 `json:"funding"`
	// MaxAccounts bounds the account map.
	MaxAccounts int `json:"max_accounts"`
	// IdleAfter is how long an idle account is kept.
	IdleAfter Duration `json:"idle_after"`
}

// Router configures the cell router's request path (cmd/router).
type Router struct {
	// MaxInFlightPerCell caps the requests one router has in flight to one
	// cell (0 = no cap).
	MaxInFlightPerCell int `json:"max_in_flight_per_cell"`
	// MaxInFlightPerTenant caps one tenant's requests in flight through one
	// router, before the per-cell cap (0 = no cap).
	MaxInFlightPerTenant int `json:"max_in_flight_per_tenant"`
	// BodyTimeout bounds reading a forwarded request's body (0 = none).
	BodyTimeout Duration `json:"body_timeout"`
	// MinBodyBytesPerSecond is the slowest a body may arrive after
	// BodyRateGrace (0 = no minimum).
	MinBodyBytesPerSecond int64 `json:"min_body_bytes_per_second"`
	// BodyRateGrace is how long a body may take before the minimum rate
	// applies.
	BodyRateGrace Duration `json:"body_rate_grace"`
	// AdminTokenEnv names the env var holding the token of the router's
	// console at /admin/; without a value there, the router forwards
	// /admin/ to the cells.
	AdminTokenEnv string `json:"admin_token_env"`
}

// Console guards the operator consoles of the cells and of the router.
type Console struct {
	// TrustedProxies are the CIDRs (or addresses) of the proxies whose
	// X-Forwarded-For and X-Forwarded-Proto are believed.
	TrustedProxies []string `json:"trusted_proxies"`
	// SecureCookies marks the session cookie Secure on every answer.
	SecureCookies bool `json:"secure_cookies"`
	// SessionIdle ends a session unused for this long (the router's at
	// most 15 minutes).
	SessionIdle Duration `json:"session_idle"`
	// SessionTTL is the longest a session lasts from its login.
	SessionTTL Duration `json:"session_ttl"`
	// OIDC is the consoles' OpenID Connect login (off without an Issuer).
	OIDC ConsoleOIDC `json:"oidc"`
}

// ConsoleOIDC lets operators log in to the consoles through an OpenID
// Connect provider.
type ConsoleOIDC struct {
	// Issuer is the provider's issuer URL; "" turns the login off.
	Issuer string `json:"issuer"`
	// ClientID is the consoles' client at the provider.
	ClientID string `json:"client_id"`
	// ClientSecretEnv names the env var holding the client's secret.
	ClientSecretEnv string `json:"client_secret_env"`
	// RedirectURL is the registered callback; "" derives it per request.
	RedirectURL string `json:"redirect_url"`
	// Scopes are asked for besides openid and email.
	Scopes []string `json:"scopes"`
	// RoleClaim is the ID token's claim that maps a person to a role.
	RoleClaim string `json:"role_claim"`
	// OperatorValues in RoleClaim make a person an operator.
	OperatorValues []string `json:"operator_values"`
	// ReadOnlyValues in RoleClaim make a person read-only.
	ReadOnlyValues []string `json:"read_only_values"`
}

// Jobs configures the job runtime.
type Jobs struct {
	// Backend is "local" or "postgres".
	Backend string `json:"backend"`
	// Workers is the number of workers (per database with shard_local).
	Workers int `json:"workers"`
	// Tenants holds the tenant isolation settings of the local backend.
	Tenants JobTenants `json:"tenants"`
	// Postgres holds the PostgreSQL backend's settings.
	Postgres JobsPostgres `json:"postgres"`
	// ShutdownTimeout drains in-flight jobs on shutdown.
	ShutdownTimeout Duration `json:"shutdown_timeout"`
	// Kinds are the job kinds of the service.
	Kinds []JobKind `json:"kinds"`
	// Periodic are the jobs enqueued on a schedule.
	Periodic []PeriodicJob `json:"periodic"`
}

// PeriodicJob is one entry of jobs.periodic.
type PeriodicJob struct {
	// Name keys the entry's stored schedule.
	Name string `json:"name"`
	// Kind is the job kind to enqueue.
	Kind string `json:"kind"`
	// Args are the kind's args as JSON.
	Args json.RawMessage `json:"args"`
	// Every is the interval between runs ("" with Cron).
	Every Duration `json:"every,omitempty"`
	// Cron is a five-field cron expression or descriptor ("" with Every).
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone Cron is read in ("" is UTC).
	TimeZone string `json:"time_zone"`
	// RunOnStart runs the job once when the entry is first scheduled.
	RunOnStart bool `json:"run_on_start"`
	// CatchUp is "once" or "skip": what missed periods do.
	CatchUp string `json:"catch_up"`
}

// JobTenants holds per-tenant job isolation.
type JobTenants struct {
	// MaxConcurrent jobs of one tenant at once (0 = none).
	MaxConcurrent int `json:"max_concurrent"`
	// Lanes for shuffle sharding (0 = off).
	Lanes int `json:"lanes"`
	// LanesPerTenant that serve each tenant.
	LanesPerTenant int `json:"lanes_per_tenant"`
}

// JobsPostgres holds the PostgreSQL job backend's settings.
type JobsPostgres struct {
	// ShardLocal makes a jobs table on every shard.
	ShardLocal bool `json:"shard_local"`
	// Claim order: "fair" or "fifo".
	Claim string `json:"claim"`
	// RescueAfter: a running job older than this is rescued.
	RescueAfter Duration `json:"rescue_after"`
	// Retention of finished jobs.
	Retention Duration `json:"retention"`
	// BreakerFailures opens the control-enqueue circuit breaker.
	BreakerFailures int `json:"breaker_failures"`
	// BreakerCooldown before a half-open probe.
	BreakerCooldown Duration `json:"breaker_cooldown"`
}

// JobKind is one kind of job and its typed arguments.
type JobKind struct {
	// Name of the kind, for example "send_welcome".
	Name string `json:"name"`
	// Queue the kind runs on.
	Queue string `json:"queue"`
	// Args are the kind's typed argument fields, in order.
	Args []JobArg `json:"args"`
	// MaxAttempts before a job is discarded.
	MaxAttempts int `json:"max_attempts"`
	// Timeout of one attempt.
	Timeout Duration `json:"timeout"`
	// Concurrency caps running jobs of this kind (0 = none).
	Concurrency int `json:"concurrency"`
	// Priority orders the kind's jobs within a tenant, 1 (first) to 4.
	Priority int `json:"priority"`
	// UniqueBy names args that dedupe active jobs.
	UniqueBy []string `json:"unique_by"`
}

// JobArg is one typed argument field of a job kind.
type JobArg struct {
	// Name of the field (snake_case, the JSON name).
	Name string `json:"name"`
	// Type: "string", "int64", "bool", "float64" or "time".
	Type string `json:"type"`
}

// Database names the control database and the shards.
type Database struct {
	// Control is the cell's control database (jobs, cell-wide state).
	Control ControlDB `json:"control"`
	// Shards hold tenant data, split by slot.
	Shards []Shard `json:"shards"`
	// AppMigrations names the databases the app's migrations go to:
	// "shards" (the default), "control" or "both".
	AppMigrations string `json:"app_migrations"`
	// TenantTables are the app's tables of tenant rows (tenant_id and slot
	// columns), parents before children; slotmove moves them.
	TenantTables []string `json:"tenant_tables"`
}

// App migration targets (Database.AppMigrations).
const (
	AppMigrationsShards  = "shards"
	AppMigrationsControl = "control"
	AppMigrationsBoth    = "both"
)

// AppMigrationsOnControl reports whether the app's migrations go to the
// control database.
func (d Database) AppMigrationsOnControl() bool {
	return d.AppMigrations == AppMigrationsControl || d.AppMigrations == AppMigrationsBoth
}

// AppMigrationsOnShards reports whether the app's migrations go to the
// shards (also when AppMigrations is empty: the default).
func (d Database) AppMigrationsOnShards() bool {
	return d.AppMigrations != AppMigrationsControl
}

// ControlDB is the control database of a cell.
type ControlDB struct {
	// Name of the database in logs and metrics.
	Name string `json:"name"`
	// DSNEnv names the env var holding its DSN.
	DSNEnv string `json:"dsn_env"`
	// MaxConns of its pool.
	MaxConns int `json:"max_conns"`
}

// Shard is one PostgreSQL shard of tenant data.
type Shard struct {
	// Name of the shard.
	Name string `json:"name"`
	// DSNEnv names the env var holding its DSN.
	DSNEnv string `json:"dsn_env"`
	// Slots it owns ("0-8191", "42"); empty on every shard splits evenly.
	Slots []string `json:"slots"`
	// MaxConns of its pool.
	MaxConns int `json:"max_conns"`
}

// Cell is one deployment of the service and the slots it serves.
type Cell struct {
	// Name of the cell.
	Name string `json:"name"`
	// URL the router forwards to.
	URL string `json:"url"`
	// Slots it owns; empty on every cell splits evenly.
	Slots []string `json:"slots"`
}

// Route is one HTTP route of the service.
type Route struct {
	// Method is the HTTP method.
	Method string `json:"method"`
	// Path is Echo's path pattern.
	Path string `json:"path"`
	// Handler is the Go method name on the generated Handler interface.
	Handler string `json:"handler"`
	// Public routes skip tenancy and are never counted.
	Public bool `json:"public"`
	// Idempotent routes honour an Idempotency-Key header (tenant routes of
	// POST, PUT, PATCH or DELETE only).
	Idempotent bool `json:"idempotent"`
	// Request names the definition (without "#") of the JSON body; "" for
	// an untyped route.
	Request string `json:"request,omitempty"`
	// Params names the definition of the path parameters (its fields are
	// the path's {names}); "" for none: the handler reads c.Param itself.
	Params string `json:"params,omitempty"`
	// Query names the definition of the query parameters; "" for none.
	Query string `json:"query,omitempty"`
	// Responses maps a status ("201") to the definition of its JSON body.
	Responses map[string]string `json:"responses,omitempty"`
	// Group names the route's group, whose app middleware wraps it
	// (api.Middleware.Groups); empty for none.
	Group string `json:"group"`
}

// Typed reports whether the route declares any schema, so its handler
// gets the typed signature.
func (r Route) Typed() bool {
	return r.Request != "" || r.Params != "" || r.Query != "" || len(r.Responses) > 0
}

// Deploy shapes the generated Kubernetes manifests and monitoring mixin.
// It names Secrets, never holds their values.
type Deploy struct {
	// Image is the service's container image reference.
	Image string `json:"image"`
	// ImagePullPolicy of every container: IfNotPresent, Always or Never.
	ImagePullPolicy string `json:"image_pull_policy"`
	// Namespace every object is created in.
	Namespace string `json:"namespace"`
	// MonitoringNamespace is where Prometheus runs; it may scrape the cells.
	MonitoringNamespace string `json:"monitoring_namespace"`
	// Labels are added to every object and pod.
	Labels map[string]string `json:"labels"`
	// Cells shapes each cell's Deployment.
	Cells Workload `json:"cells"`
	// Router shapes the router's Deployment.
	Router RouterWorkload `json:"router"`
	// TerminationGracePeriod is the wait between SIGTERM and SIGKILL.
	TerminationGracePeriod Duration `json:"termination_grace_period"`
	// PreStopSleep delays SIGTERM so endpoints stop routing to the pod first.
	PreStopSleep Duration `json:"pre_stop_sleep"`
	// Probes times the startup, readiness and liveness probes.
	Probes Probes `json:"probes"`
}

// Workload is one kind of Deployment.
type Workload struct {
	// Replicas of the Deployment.
	Replicas int `json:"replicas"`
	// MinAvailable pods of the PodDisruptionBudget.
	MinAvailable int `json:"min_available"`
	// Resources of the container.
	Resources Resources `json:"resources"`
}

// RouterWorkload is the router's Deployment and its port.
type RouterWorkload struct {
	// Replicas of the Deployment.
	Replicas int `json:"replicas"`
	// MinAvailable pods of the PodDisruptionBudget.
	MinAvailable int `json:"min_available"`
	// Resources of the container.
	Resources Resources `json:"resources"`
	// Port the router listens on.
	Port int `json:"port"`
}

// Workload returns the router's replicas, budget and resources.
func (r RouterWorkload) Workload() Workload {
	return Workload{Replicas: r.Replicas, MinAvailable: r.MinAvailable, Resources: r.Resources}
}

// Resources are a container's requests and limits.
type Resources struct {
	// Requests reserve capacity for scheduling.
	Requests ResourceList `json:"requests"`
	// Limits cap the container.
	Limits ResourceList `json:"limits"`
}

// ResourceList holds Kubernetes quantities; "" leaves one unset.
type ResourceList struct {
	// CPU, for example "250m".
	CPU string `json:"cpu"`
	// Memory, for example "256Mi".
	Memory string `json:"memory"`
}

// Probes times the probes of every container.
type Probes struct {
	// PeriodSeconds between two probes.
	PeriodSeconds int `json:"period_seconds"`
	// TimeoutSeconds of one probe.
	TimeoutSeconds int `json:"timeout_seconds"`
	// FailureThreshold of readiness and liveness.
	FailureThreshold int `json:"failure_threshold"`
	// StartupFailureThreshold × PeriodSeconds is the startup budget.
	StartupFailureThreshold int `json:"startup_failure_threshold"`
}

// Duration is a time.Duration written as a Go duration string ("5s") in
// JSON, the form the CUE schema uses.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as a Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "250ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
