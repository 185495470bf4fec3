package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
	"github.com/cellgate/cellgate/internal/shards"
)

// errShardUnavailable is the answer to shards.ErrShardUnavailable: 503 with
// Retry-After, so a down shard fails only its own tenants, fast.
var errShardUnavailable = bulkhead.NewRejection(http.StatusServiceUnavailable, 1, "shard_unavailable",
	shards.ErrShardUnavailable.Error())

// ShardPermits is the shards.PermitsFunc of the per-tenant database
// bulkhead: the binding the Tenant middleware put in the request's context.
// cmd/server hands it to shards.Set.UsePermits.
func ShardPermits(ctx context.Context) shards.Permits {
	if b := bulkhead.DBBindingFrom(ctx); b != nil {
		return b
	}
	return nil
}

// rejectionOf returns the refusal err carries: a bulkhead's own, or the
// one a shard error maps to.
func rejectionOf(err error) (*bulkhead.Rejection, bool) {
	var rej *bulkhead.Rejection
	switch {
	case errors.As(err, &rej):
		return rej, true
	case errors.Is(err, shards.ErrShardUnavailable):
		return errShardUnavailable, true
	}
	return nil, false
}

// errorBody is the JSON shape of every error the runtime writes.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// jsonErrorHandler writes every error as JSON. Internal errors are logged
// with the request id and answered without detail.
func jsonErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if rej, ok := rejectionOf(err); ok {
			// A refused database checkout: 503 with Retry-After, and the
			// bulkhead's own body.
			_ = rej.Write(c)
			return
		}
		status, msg, known := errorStatus(err)
		if !known {
			log.Error("handler error", "error", err, "path", c.Path(),
				"request_id", c.Response().Header().Get(requestid.Header))
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, errorBody{Error: msg})
	}
}

// BadBody is what a handler returns for a request body that did not bind
// (err from echo.Context.Bind) or did not validate (err nil): 400 with msg
// for the client, except for a body over server.body_limit_bytes, whose
// error is kept (as the 400's cause, which errorStatus looks through) so
// the server answers 413. Echo's Bind wraps every read error in a 400, so a
// handler that answers its own 400 without the cause would hide the limit
// from a client that sent a chunked body.
func BadBody(err error, msg string) error {
	return echo.NewHTTPError(http.StatusBadRequest, msg).SetInternal(err)
}

// errorStatus is the status and client message jsonErrorHandler gives err;
// the HTTP metrics use it to label a response the handler has not written.
// known is false for an unexpected error (500, logged).
func errorStatus(err error) (status int, msg string, known bool) {
	var he *echo.HTTPError
	var tooLarge *http.MaxBytesError
	if rej, ok := rejectionOf(err); ok {
		return rej.Status, rej.Message, true
	}
	switch {
	case errors.As(err, &tooLarge):
		// Before HTTPError: Echo's Bind wraps a read error in a 400.
		return http.StatusRequestEntityTooLarge, "request body too large", true
	case errors.As(err, &he):
		return he.Code, fmt.Sprint(he.Message), true
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "request timed out", true
	}
	return http.StatusInternalServerError, http.StatusText(http.StatusInternalServerError), false
}
