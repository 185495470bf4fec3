package runtime

import (
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
)

// frozenSlots answers 503 + Retry-After: 1 (bulkhead.ErrSlotMoving) to a
// tenant whose slot is frozen in set's shard map, right after tenancy: no
// bulkhead, app middleware, handler or database sees the request, so no
// write reaches the range's old shard while it is being switched. A
// request it lets through is counted on the map it checked until it ends
// (shards.Set.OlderInFlight tells a move when none of the old map's is
// left). While nothing is frozen it costs one atomic load and the count.
func frozenSlots(set *shards.Set) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id, _ := tenant.From(c.Request().Context())
			if id == "" {
				return next(c)
			}
			r := set.Routing()
			if r.FrozenTenant(id) {
				return bulkhead.ErrSlotMoving.Write(c)
			}
			r.Enter()
			defer r.Leave()
			return next(c)
		}
	}
}
