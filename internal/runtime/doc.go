// Package runtime wires one cell of a cellgate service: config at boot, the
// Echo middleware chain (request id → recover → body limit → deadline →
// per-route HTTP metrics → tenancy → tenant bulkhead → server admission →
// handler; see package bulkhead and docs/bulkheads.md), probes, metrics,
// the admin admission report, database pools and graceful shutdown. It
// knows nothing of a particular app's handlers: the generated gen/api
// package registers them through Server's Public and Tenant methods.
//
// Concurrency: build a Server, register routes and readiness checks, then
// call Run once. Registration is not safe once Run has started; everything
// the request path touches afterwards is read-only or atomic.
package runtime
