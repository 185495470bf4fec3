package runtime

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
)

// clientGone reports whether err ended the request because its client went
// away: net/http cancelled the request's context (a server-side deadline
// would be context.DeadlineExceeded instead) and err is that cancellation,
// directly or as PostgreSQL's answer to the cancel request pgx sends for a
// query whose context ended (SQLSTATE 57014, query_canceled). Such a
// request is counted under code "499" (nginx's name for it) and logged at
// debug; no answer is written, nobody is left to read it.
func clientGone(c echo.Context, err error) bool {
	if err == nil || c.Request().Context().Err() != context.Canceled {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014"
}
