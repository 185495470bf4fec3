package runtime

import (
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/requestid"
	"github.com/cellgate/cellgate/internal/tenant"
)

// requestScope is the server's one global middleware. It does, in this
// order, what four would: the request id (the client's X-Request-ID, or a
// new one, echoed on the response), panic recovery (a logged JSON 500), the
// body limit (413 before reading when Content-Length says so, and
// http.MaxBytesReader otherwise) and the request deadline (lazyDeadline:
// its timer starts only if something waits on it), and it installs
// the request's tenant.Scope, the one context copy a request makes.
//
// One middleware instead of four matters because Echo applies global
// middleware per request: each layer is a closure allocation and a call,
// and each context layer a copy of the *http.Request (BenchmarkChain).
// errBodyTooLarge refuses a Content-Length over server.body_limit_bytes
// before a byte of the body is read.
var errBodyTooLarge = NewClientError(http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")

type requestScope struct {
	log     *slog.Logger
	limit   int64
	timeout time.Duration // 0: no deadline
	body    bodyLimits
	// identity names the headers a Connection header may not list (the
	// tenant header, Authorization, Cookie), in canonical form.
	identity []string
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

	if closeAfter, err := rs.checkHead(req); err != nil || closeAfter {
		// A refusal comes before a byte of the body is read; the
		// connection closes after the answer, so nothing of the body is
		// ever read as a request.
		res.Header().Set(echo.HeaderConnection, "close")
		if err != nil {
			return err
		}
	}

	if req.ContentLength > rs.limit {
		return errBodyTooLarge
	}
	if req.Body != nil && req.Body != http.NoBody {
		// The server's own writer, so an overrun also closes the connection.
		req.Body = http.MaxBytesReader(res.Writer, req.Body, rs.limit)
		req.Body = rs.body.wrap(res.Writer, req.Body, time.Now())
	}

	ctx := req.Context()
	if rs.timeout > 0 {
		dl := newLazyDeadline(ctx, rs.timeout)
		defer dl.release()
		ctx = dl
	}
	c.SetRequest(req.WithContext(tenant.NewScope(ctx)))
	return next(c)
}

// Refusals of a request's head.
var (
	errObsFold = NewClientError(http.StatusBadRequest, "obs_fold",
		"folded header lines (obs-fold) are not accepted")
	errAmbiguousFraming = NewClientError(http.StatusBadRequest, "ambiguous_framing",
		"Transfer-Encoding with Content-Length, or on HTTP/1.0, is not accepted")
	errHopByHopIdentity = NewClientError(http.StatusBadRequest, "hop_by_hop_identity",
		"the Connection header may not name the tenant header, Authorization or Cookie")
)

// checkHead refuses what the connection's scan found in r's head, and a
// Connection header naming an identity header: a proxy would strip the
// header it names, so the router and the cell would see different
// identities. A head net/http had buffered before its turn was not
// scanned: it is served, and the connection closed after it.
func (rs *requestScope) checkHead(r *http.Request) (closeAfter bool, err error) {
	switch headVerdictOf(r) {
	case headObsFold:
		return true, errObsFold
	case headCLTE:
		return true, errAmbiguousFraming
	case headUnvetted:
		closeAfter = true
	}
	for _, v := range r.Header[echo.HeaderConnection] {
		for len(v) > 0 {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = textproto.TrimString(tok)
			for _, name := range rs.identity {
				if strings.EqualFold(tok, name) {
					return true, errHopByHopIdentity
				}
			}
		}
	}
	return closeAfter, nil
}

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
