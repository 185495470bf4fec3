// Package runtime wires one cell of a cellgate service: config at boot,
// guarded connections (a head deadline fixed at a request's first byte, the
// head's framing scanned; package httpguard), the Echo middleware chain (request
// id → recover → framing and method refusals → body limit and body
// deadlines → deadline →
// per-route HTTP metrics → tenancy → tenant bulkhead → server admission →
// the request's shard accessor → handler; see package bulkhead and
// docs/bulkheads.md), probes, metrics,
// the admin admission report, the JSON-only binder, error answers (a
// client's bad input, the database's refusals of it included, is a 4xx
// with an RFC 9457 problem details body; docs/errors.md), database pools and graceful shutdown. It
// knows nothing of a particular app's handlers: the generated gen/api
// package registers them through Server's Public and Tenant methods, and a
// tenant route's handler gets its shards.Accessor as an argument.
//
// Concurrency: build a Server, register routes and readiness checks, then
// call Run once. Registration is not safe once Run has started; everything
// the request path touches afterwards is read-only or atomic.
package runtime
