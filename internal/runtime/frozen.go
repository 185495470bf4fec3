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
// write reaches the range's old shard while it is being switched. While
// nothing is frozen it costs one atomic load.
func frozenSlots(set *shards.Set) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if id, _ := tenant.From(c.Request().Context()); id != "" && set.Frozen(id) {
				return bulkhead.ErrSlotMoving.Write(c)
			}
			return next(c)
		}
	}
}
