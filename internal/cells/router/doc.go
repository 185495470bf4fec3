// Package router is the cell router's process: a stateless reverse proxy
// that sends each request to its tenant's cell (a cells.CellRouter).
//
// Proxy is an http.Handler that refuses what the cells refuse at the edge
// (package httpguard: the same bytes get the same answer), extracts the
// tenant exactly as the cells do (package tenancy, built from the same
// spec block), and forwards the request with httputil.ReverseProxy over
// one http.Transport per cell, unbuffered (bodies streamed under the
// body deadlines and minimum rate, SSE flushed at once, WebSocket and
// other upgrades passed through). It caps the requests in flight per
// tenant (an admission.Engine) and per cell, checks each cell's readiness
// probe, ejects a cell on its own faults only (never on a client's bad or
// slow input), and answers 503 with Retry-After for the tenants of a down
// cell only. Run serves it with net/http's server on a guarded listener
// (httpguard.Listener) and reloads the slot map file when it changes. It
// knows net/http only (no Echo).
//
// The router holds no tenant data and no state that other copies need:
// run as many copies side by side as you like, all reading the same slot
// map file.
//
// Concurrency contract: a Proxy is safe for concurrent use by any number
// of requests; its slot map is swapped atomically (an in-flight request
// keeps the map it started with) and its per-cell state (health, in-flight
// counts, metrics) is kept in atomics, so routing takes no lock.
package router
