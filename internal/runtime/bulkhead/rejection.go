package bulkhead

import (
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/httpguard"
)

// Rejection is a refusal by a bulkhead or the server limit. It is an error
// (database refusals travel up the handler as one) and it writes itself as
// RFC 9457 problem details (httpguard.Problem: Message is the detail, Code
// the code) with Status and, when RetryAfter > 0, a Retry-After header.
type Rejection struct {
	// Status is the HTTP status: 503 for capacity, 429 for rate and quota,
	// 421 for a tenant of another cell.
	Status int
	// RetryAfter is the Retry-After value in whole seconds; 0 sends none.
	RetryAfter int
	// Code is a stable machine-readable reason, e.g. "tenant_overloaded".
	Code string
	// Message is the human-readable reason sent to the client.
	Message string

	// Encoded once so a refusal, the path a noisy tenant hammers, costs no
	// JSON encoding.
	p *httpguard.Problem
}

// NewRejection builds a Rejection and pre-encodes its response.
func NewRejection(status, retryAfter int, code, message string) *Rejection {
	return &Rejection{Status: status, RetryAfter: retryAfter, Code: code, Message: message,
		p: httpguard.NewRetryProblem(status, retryAfter, code, message)}
}

// Error implements error.
func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// Write answers c with the rejection. A HEAD request gets the status and
// headers only.
//
// It returns r itself, so the middleware outside (the server's request
// span, refusal log line and metrics) learns the refusal's code; the
// answer is committed, so the error handler writes nothing more.
func (r *Rejection) Write(c echo.Context) error {
	r.p.Write(c.Response(), c.Request().Method == http.MethodHead)
	return r
}

// The refusals the bulkheads give. Their codes are stable API.
var (
	// ErrTenantOverloaded: the tenant has tenancy.max_concurrent_requests
	// requests in flight.
	ErrTenantOverloaded = NewRejection(http.StatusServiceUnavailable, 1, "tenant_overloaded",
		"too many requests in flight for this tenant")
	// ErrTenantDBOverloaded: the tenant's requests hold
	// tenancy.max_db_connections database connections.
	ErrTenantDBOverloaded = NewRejection(http.StatusServiceUnavailable, 1, "tenant_db_overloaded",
		"too many database connections in use for this tenant")
	// ErrServerOverloaded: the server has server.max_concurrent_requests
	// requests in flight.
	ErrServerOverloaded = NewRejection(http.StatusServiceUnavailable, 1, "server_overloaded",
		"the server is at its request limit")
	// ErrTenantCapacity: the admission engine holds admission.max_accounts
	// tenants and none is idle enough to evict.
	ErrTenantCapacity = NewRejection(http.StatusServiceUnavailable, 1, "tenant_capacity",
		"too many tenants are active")
	// ErrTenantOtherCell: the tenant's slot belongs to another cell (the
	// client, or a router with an old slot map, sent it to the wrong one).
	// Nothing was counted; retrying here does not help.
	ErrTenantOtherCell = NewRejection(http.StatusMisdirectedRequest, 0, "tenant_other_cell",
		"the tenant belongs to another cell")
	// ErrSlotMoving: the tenant's slot is frozen in the cell's shard map
	// while its range moves between two shards (internal/shardmap). The
	// freeze lasts about a second.
	ErrSlotMoving = NewRejection(http.StatusServiceUnavailable, 1, "slot_moving",
		"the tenant's data is being moved to another shard; retry shortly")
	// ErrTenantQuota: the tenant's funding line and overage allowance are
	// spent. Retrying does not help until the control plane funds it, so
	// there is no Retry-After.
	ErrTenantQuota = NewRejection(http.StatusTooManyRequests, 0, "tenant_quota_exhausted",
		"the tenant's request quota is exhausted")
)

// RateRejection returns the 429 for a tenant over rate (requests per
// second): Retry-After is the time one request's worth of tokens takes to
// come back, rounded up to a whole second.
func RateRejection(rate float64) *Rejection {
	after := 1
	if rate > 0 && rate < 1 {
		after = int(math.Min(math.Ceil(1/rate), float64(24*time.Hour/time.Second)))
	}
	return NewRejection(http.StatusTooManyRequests, after, "tenant_rate_limited",
		"the tenant's request rate is over its limit")
}
