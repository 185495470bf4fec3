// Package cells routes tenants to cells: identical, independent deployments
// of the service, each owning a set of the 16,384 hash slots (package
// slots, the same hash the database shards use, so a cell can own whole
// shards).
//
// It holds three things:
//
//   - CellRouter: the pure slot map from tenant (or key, or slot) to
//     CellSpec, and URLFor. Built from specs that must cover every slot
//     exactly once.
//   - The router process: Proxy, an http.Handler that extracts the tenant
//     exactly as the cells do, forwards the request unbuffered to the
//     tenant's cell (bodies streamed, SSE flushed at once, WebSocket and
//     other upgrades passed through), checks each cell's /readyz, ejects a
//     cell on transport errors, and answers 503 with Retry-After for the
//     tenants of a down cell only. RunRouter serves it on its own HTTP/1.1
//     loop for plain requests, handing other connections to net/http's
//     server, and reloads the slot map file when it changes.
//   - Deploy output: DeployFiles renders the per-cell config overlays and
//     the router's slot map from a spec, as bytes.
//
// The router holds no tenant data and no state that other copies need:
// run as many copies side by side as you like, all reading the same slot
// map file.
//
// Concurrency contract: a CellRouter and a SlotMap's Build result are
// immutable and safe for concurrent use. A Proxy is safe for concurrent use
// by any number of requests; its slot map is swapped atomically (an
// in-flight request keeps the map it started with) and its per-cell state
// (health, in-flight counts, metrics) is kept in atomics, so routing takes
// no lock; the request path takes short mutexes only to hand out and take
// back a pooled cell connection and, on the own loop, in the connection's
// reused request context. DeployFiles and the SlotMap helpers are pure
// functions.
package cells
