// Package bulkhead keeps one tenant from taking more than its share of a
// cell: a per-tenant request bulkhead (concurrency cap, optional rate limit
// and quota, all on an admission.Engine), a server-wide admission limit, and
// per-tenant database-connection permits bound to a request.
//
// The two middlewares run in this order, after the tenancy middleware:
//
//	tenancy → Tenant (per-tenant permit) → Admission (server permit) →
//	DBPermits.Shard (the request's shard accessor) → handler
//
// so a request refused by its tenant's bulkhead never takes a server
// permit, and one tenant can hold at most its cap of the server limit. Both
// permits go back when the response head is written (WriteHeader, the first
// Write, Flush or Hijack) or when the handler returns, panics or gives up on
// a deadline, whichever comes first: a long stream (SSE, a hijacked
// WebSocket) holds no permit. The release is done by a response-writer
// wrapper that keeps http.Flusher, http.Hijacker and Unwrap (so
// http.ResponseController) working.
//
// Database permits are different: a checkout through the shard accessor
// (internal/shards.Accessor) takes one while the request is in
// flight, the streaming body included, and gives it back with the
// connection. DBPermits.Shard, the innermost step of a tenant route, builds
// the request's accessor once, with a binding of the permits (Bind), and
// passes it to the handler as an argument; the binding goes dead when the
// handler returns, so a goroutine that outlives its request is not
// counted.
//
// Refusals are *Rejection values: 503 with Retry-After for the bulkheads
// and the server limit, 429 for the rate limit and the quota. The
// middlewares write them as JSON; a database refusal is returned as an error
// for the server's JSON error handler.
//
// # Concurrency contract
//
// Configs are plain data, read once by the *WithConfig constructors. The
// middlewares, Limiter, DBPermits and Rejection values are immutable or
// atomic after construction and safe for concurrent use. The request path
// takes no lock and allocates nothing for the request and server permits
// (the per-request writer wrapper is pooled); binding database permits costs
// one DBBinding per request. A DBBinding belongs to one request:
// Acquire may be called from any goroutine, but each returned permit has one
// owner that releases it once. A ResponseWriter is not safe for concurrent
// use (net/http's rule), and neither is the wrapper.
package bulkhead
