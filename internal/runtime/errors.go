package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/runtime/bulkhead"
	"github.com/cellgate/cellgate/internal/shards"
)

// errShardUnavailable is the answer to shards.ErrShardUnavailable: 503 with
// Retry-After, so a down shard fails only its own tenants, fast.
var errShardUnavailable = bulkhead.NewRejection(http.StatusServiceUnavailable, 1, "shard_unavailable",
	shards.ErrShardUnavailable.Error())

// errNoTenant is the answer to a checkout without a tenant (shards.ErrNoTenant):
// a tenant route served with tenancy off has no tenant to route by, and
// the client can fix that by naming one, so it is the tenancy's 401.
var errNoTenant = bulkhead.NewRejection(http.StatusUnauthorized, 0, "tenant_missing",
	"the request names no tenant")

// rejectionOf returns the refusal err carries: a bulkhead's own, or the
// one a shard error maps to.
func rejectionOf(err error) (*bulkhead.Rejection, bool) {
	if err == nil {
		return nil, false // before rej escapes to errors.As: no allocation
	}
	var rej *bulkhead.Rejection
	switch {
	case errors.As(err, &rej):
		return rej, true
	case errors.Is(err, shards.ErrShardUnavailable):
		return errShardUnavailable, true
	case errors.Is(err, shards.ErrNoTenant):
		return errNoTenant, true
	}
	return nil, false
}

// ClientError is an answer about the client's own request: Status (a 4xx,
// or 501/505 for a method or version the server does not implement),
// a stable machine-readable Code and a Message safe to show. Handlers may
// return one; the runtime builds them for bad bodies and for the
// PostgreSQL errors a client's input causes (see errorStatus).
type ClientError struct {
	// Status is the HTTP status; one no RFC defines is answered 500.
	Status int
	// Code is stable and machine-readable, e.g. "reference_not_found".
	Code string
	// Message is the human-readable reason sent to the client.
	Message string
	// Err is the cause, logged, never sent. Optional.
	Err error
}

// NewClientError returns a *ClientError without a cause.
func NewClientError(status int, code, message string) *ClientError {
	return &ClientError{Status: status, Code: code, Message: message}
}

func (e *ClientError) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause, so errorStatus still finds a body over the
// limit or a read deadline behind a refused bind.
func (e *ClientError) Unwrap() error { return e.Err }

// problemErrorHandler writes every error as RFC 9457 problem details
// (httpguard.Encode: type, title, status, detail and the stable code), the
// router's shape too. Internal
// errors are logged with the request id and answered without detail;
// refusals of the client's input to the database are logged at debug with
// their SQLSTATE and constraint, which the client never sees.
func problemErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if clientGone(c, err) {
			// Nobody is left to read an answer; the metrics count 499.
			log.Debug("client went away", "error", err, "path", c.Path(),
				"request_id", c.Response().Header().Get(requestid.Header))
			return
		}
		if rej, ok := rejectionOf(err); ok {
			// A refused database checkout: 503 with Retry-After, and the
			// bulkhead's own body.
			_ = rej.Write(c)
			return
		}
		a := errorStatus(err)
		id := c.Response().Header().Get(requestid.Header)
		switch {
		case !a.known:
			log.Error("handler error", "error", err, "path", c.Path(), "request_id", id)
		case a.pg != nil:
			log.Debug("client input refused by the database", "sqlstate", a.pg.Code,
				"constraint", a.pg.ConstraintName, "path", c.Path(), "request_id", id)
		}
		if a.closeConn {
			// What is left of the body is not worth reading (over the
			// limit, or stalled mid-way): answer and close.
			closeAfterAnswer(c.Response())
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(a.status)
			return
		}
		if a.body != nil {
			_ = c.Blob(a.status, httpguard.ContentType, a.body)
			return
		}
		_ = c.Blob(a.status, httpguard.ContentType, httpguard.Encode(a.status, a.code, a.msg))
	}
}

// BadBody is what a handler returns for a request body that did not bind
// (err from echo.Context.Bind) or did not validate (err nil). A bind error
// is answered as the binder refused it (400 bad JSON or trailing data, 413
// over server.body_limit_bytes, 415 not JSON, 408 too slow): those reasons
// are the client's to know, and hiding a 413 behind a 400 would hide the
// limit from a client that sent a chunked body. A validation failure is 400
// with msg and the code "invalid_body".
func BadBody(err error, msg string) error {
	if err != nil {
		return err
	}
	return &ClientError{Status: http.StatusBadRequest, Code: "invalid_body", Message: msg}
}

// answer is what problemErrorHandler writes for an error.
type answer struct {
	status    int
	code, msg string
	known     bool            // false: unexpected (500, logged)
	pg        *pgconn.PgError // the database's refusal behind a 4xx, logged
	closeConn bool
	body      []byte // a problem's own encoded body (its errors member), when set
}

// errorStatus is the answer problemErrorHandler gives err; the HTTP metrics
// use its status to label a response the handler has not written.
func errorStatus(err error) answer {
	var (
		he       *echo.HTTPError
		ce       *ClientError
		tooLarge *http.MaxBytesError
		prob     *httpguard.Problem
		pe       *pgconn.PgError
	)
	if rej, ok := rejectionOf(err); ok {
		return answer{status: rej.Status, code: rej.Code, msg: rej.Message, known: true}
	}
	switch {
	case errors.As(err, &tooLarge):
		// Before HTTPError and ClientError: a bind wraps a read error.
		p := httpguard.ErrBodyTooLarge
		return answer{status: p.Status, code: p.Code, msg: p.Detail, known: true, closeConn: true}
	case httpguard.BodyTooSlow(err):
		// A body read hit the body deadline or fell below the minimum
		// rate (server.body_read_timeout, server.body_min_bytes_per_second).
		p := httpguard.ErrBodyTooSlow
		return answer{status: p.Status, code: p.Code, msg: p.Detail, known: true, closeConn: true}
	case httpguard.BodyMalformed(err):
		// The client broke its body (a malformed chunk, cut short).
		p := httpguard.ErrBodyMalformed
		return answer{status: p.Status, code: p.Code, msg: p.Detail, known: true, closeConn: true}
	case errors.As(err, &prob):
		// The edge's refusals (httpguard.Rules.Check, the body limit) and
		// the generated validation's invalid_request, with its errors.
		return answer{status: prob.Status, code: prob.Code, msg: prob.Detail, known: true, body: prob.Body()}
	case errors.As(err, &ce):
		return answer{status: standardStatus(ce.Status), code: ce.Code, msg: ce.Message, known: true}
	case errors.As(err, &he):
		status := standardStatus(he.Code)
		return answer{status: status, code: statusCode(status), msg: fmt.Sprint(he.Message), known: he.Code == status}
	case errors.As(err, &pe):
		if a, ok := pgAnswer(pe); ok {
			return a
		}
	case errors.Is(err, pgx.ErrNoRows):
		return answer{status: http.StatusNotFound, code: "not_found", msg: "not found", known: true}
	case errors.Is(err, context.DeadlineExceeded):
		return answer{status: http.StatusServiceUnavailable, code: "request_timeout", msg: "request timed out", known: true}
	}
	return answer{status: http.StatusInternalServerError, code: "internal", msg: http.StatusText(http.StatusInternalServerError)}
}

// standardStatus keeps a status net/http and clients know by name: a
// handler's echo.NewHTTPError(499) would put a code no RFC defines on the
// wire, so it is answered 500 (and logged as unexpected).
func standardStatus(code int) int {
	if code < 100 || code > 599 || http.StatusText(code) == "" {
		return http.StatusInternalServerError
	}
	return code
}

// statusCode is the code of an echo.HTTPError: its status text in snake
// case ("Not Found" → "not_found"), stable because the status texts are.
func statusCode(status int) string {
	return statusCodeReplacer.Replace(strings.ToLower(http.StatusText(status)))
}

var statusCodeReplacer = strings.NewReplacer(" ", "_", "-", "_", "'", "")

// pgAnswer maps the PostgreSQL errors a client's input can cause onto
// 4xx answers. The message names the class of problem, never the SQL, the
// table or the constraint (those are logged at debug). Every other SQLSTATE
// (connection loss, serialization failures, syntax errors in the app's own
// queries) stays a logged 500: it is the service's fault, not the client's.
func pgAnswer(pe *pgconn.PgError) (answer, bool) {
	a := answer{status: http.StatusBadRequest, known: true, pg: pe}
	switch {
	case pe.Code == "23505": // unique_violation
		a.status, a.code, a.msg = http.StatusConflict, "already_exists", "already exists"
	case pe.Code == "23503": // foreign_key_violation
		a.status, a.code, a.msg = http.StatusUnprocessableEntity, "reference_not_found", "a referenced record does not exist"
	case pe.Code == "23514": // check_violation
		a.status, a.code, a.msg = http.StatusUnprocessableEntity, "value_out_of_range", "a value is outside its allowed range"
	case pe.Code == "23502": // not_null_violation
		a.status, a.code, a.msg = http.StatusUnprocessableEntity, "value_missing", "a required value is missing"
	case pe.Code == "22001", pe.Code == "54000": // string_data_right_truncation; program_limit_exceeded (index row size)
		a.code, a.msg = "value_too_long", "a value is too long"
	case pe.Code == "22021": // character_not_in_repertoire (invalid byte sequence, \u0000 in text)
		a.code, a.msg = "invalid_text", "a text value holds a byte sequence that is not valid text (such as \\u0000)"
	case pe.Code == "22003", pe.Code == "22008": // numeric_value_out_of_range; datetime_field_overflow
		a.code, a.msg = "value_out_of_range", "a value is outside its allowed range"
	case strings.HasPrefix(pe.Code, "22"): // data_exception
		a.code, a.msg = "invalid_value", "a value is not valid for its field"
	default:
		return answer{}, false
	}
	return a, true
}
