// Package probe names the paths every cellgate process (a cell's server and
// the cell router) serves to its operators: liveness, readiness and metrics.
// They are public (no tenant, never counted against a tenant's caps) and
// the router checks a cell's health on them, so each is spelled once, here.
//
// Concurrency: constants and pure functions only.
package probe

const (
	// Health answers 200 while the process runs (liveness).
	Health = "/healthz"
	// Ready answers 200 once the process can serve: its databases answer
	// and are migrated (a cell), or its slot map is loaded (the router).
	// The router's health checks of a cell use it.
	Ready = "/readyz"
	// Metrics serves Prometheus metrics.
	Metrics = "/metrics"
)

// Paths lists the probe paths, a fresh slice each call.
func Paths() []string { return []string{Health, Ready, Metrics} }

// Is reports whether path is one of the probe paths.
func Is(path string) bool {
	switch path {
	case Health, Ready, Metrics:
		return true
	}
	return false
}
