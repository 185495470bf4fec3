package runtime

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/reqctx"
	"github.com/cellgate/cellgate/internal/requestid"
)

// requestScope is the server's one global middleware. It does, in this
// order, what four would: the request id (the client's X-Request-ID, or a
// new one, echoed on the response), panic recovery (a logged JSON 500), the
// body limit (413 before reading when Content-Length says so, and
// http.MaxBytesReader otherwise) and the request deadline
// (server.request_timeout), under which it makes the request's own
// context (reqctx).
//
// Before any of that is spent on it, it refuses what the guarded
// connection found in the head and what no handler should see
// (httpguard.Rules.Check, the router's refusals too).
//
// One middleware instead of four matters because Echo applies global
// middleware per request: each layer is a closure allocation and a call,
// and each context layer a copy of the *http.Request (BenchmarkChain).
type requestScope struct {
	log     *slog.Logger
	limit   int64
	timeout time.Duration // 0: no deadline
	body    httpguard.BodyLimits
	// rules are the edge's refusals, the router's too.
	rules httpguard.Rules
}

func (rs *requestScope) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return rs.serve(c, next) }
}

func (rs *requestScope) serve(c echo.Context, next echo.HandlerFunc) (err error) {
	req, res := c.Request(), c.Response()
	id := req.Header.Get(requestid.Header)
	if id == "" {
		id = requestid.New()
	}
	res.Header().Set(requestid.Header, id)
	defer rs.recover(c, id, &err)

	if p := rs.rules.Check(req); p != nil {
		// A refusal comes before a byte of the body is read; the
		// connection closes after the answer, so nothing of the body is
		// ever read as a request.
		closeAfterAnswer(res)
		return p
	}

	if req.ContentLength > rs.limit {
		closeAfterAnswer(res)
		return httpguard.ErrBodyTooLarge
	}
	if req.Body != nil && req.Body != http.NoBody {
		// The server's own writer, so an overrun also closes the connection.
		req.Body = http.MaxBytesReader(res.Writer, req.Body, rs.limit)
		// Under the body deadlines, with its failures marked for the
		// error handler. What the handler left unread, net/http drains
		// after it: under the same deadlines.
		g := httpguard.NewBody(res.Writer, req.Body, rs.body, time.Now())
		defer g.Finish()
		req.Body = g
	}

	// The request's own context, under its deadline: the tenancy
	// middleware and the route's observation put the request's tenant
	// and server span in it, so neither copies the request again to carry
	// them.
	ctx := req.Context()
	if rs.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rs.timeout)
		defer cancel()
	}
	c.SetRequest(req.WithContext(reqctx.New(ctx)))
	return next(c)
}

// closeAfterAnswer closes the connection after the answer without
// draining the body (httpguard.CloseAfter).
func closeAfterAnswer(res *echo.Response) { httpguard.CloseAfter(res.Writer) }

// recover turns a handler panic into a logged 500. The middleware inside
// (bulkheads) release their permits in their own defers, which have run by
// now, so no permit leaks. http.ErrAbortHandler is re-raised: it asks the
// server to drop the connection.
func (rs *requestScope) recover(c echo.Context, id string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	if r == http.ErrAbortHandler {
		panic(r)
	}
	rs.log.Error("handler panic", "panic", r, "path", c.Path(), "request_id", id)
	*err = echo.NewHTTPError(http.StatusInternalServerError, "internal error")
}
