// Package proxy is the cell router's process: a stateless reverse proxy
// that sends each request to its tenant's cell (a cells.CellRouter).
//
// Proxy is an http.Handler that extracts the tenant exactly as the cells do
// (package tenancy, built from the same spec block), forwards the request
// unbuffered to the tenant's cell (bodies streamed, SSE flushed at once,
// WebSocket and other upgrades passed through), checks each cell's
// readiness probe, ejects a cell on transport errors, and answers 503 with
// Retry-After for the tenants of a down cell only. RunRouter serves it on
// its own HTTP/1.1 loop for plain requests, handing other connections to
// net/http's server, and reloads the slot map file when it changes. It
// knows net/http only (no Echo).
//
// The router holds no tenant data and no state that other copies need:
// run as many copies side by side as you like, all reading the same slot
// map file.
//
// Concurrency contract: a Proxy is safe for concurrent use by any number
// of requests; its slot map is swapped atomically (an in-flight request
// keeps the map it started with) and its per-cell state (health, in-flight
// counts, metrics) is kept in atomics, so routing takes no lock; the
// request path takes short mutexes only to hand out and take back a pooled
// cell connection and, on the own loop, in the connection's reused request
// context.
package proxy
