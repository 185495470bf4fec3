package runtime

import (
	"context"
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/requestid"
)

// requestScope is the server's one global middleware. It does, in this
// order, what four would: the request id (the client's X-Request-ID, or a
// new one, echoed on the response), panic recovery (a logged JSON 500), the
// body limit (413 before reading when Content-Length says so, and
// http.MaxBytesReader otherwise) and the request deadline
// (server.request_timeout on the request's context).
//
// Before any of that is spent on it, it refuses what the guarded
// connection found in the head and what no handler should see (checkHead).
//
// One middleware instead of four matters because Echo applies global
// middleware per request: each layer is a closure allocation and a call,
// and each context layer a copy of the *http.Request (BenchmarkChain).
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

	if closeAfter, err := rs.checkHead(req); err != nil {
		// A refusal comes before a byte of the body is read; the
		// connection closes after the answer, so nothing of the body is
		// ever read as a request.
		closeAfterAnswer(res)
		return err
	} else if closeAfter {
		res.Header().Set(echo.HeaderConnection, "close")
	}

	if req.ContentLength > rs.limit {
		closeAfterAnswer(res)
		return errBodyTooLarge
	}
	if req.Body != nil && req.Body != http.NoBody {
		// The server's own writer, so an overrun also closes the connection.
		req.Body = http.MaxBytesReader(res.Writer, req.Body, rs.limit)
		if g := rs.body.wrap(res.Writer, req.Body, time.Now()); g != nil {
			// What the handler left unread, net/http drains after it:
			// under the body's deadlines too.
			defer g.finish()
			req.Body = g
		}
	}

	if rs.timeout > 0 {
		ctx, cancel := context.WithTimeout(req.Context(), rs.timeout)
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
	}
	return next(c)
}

// Refusals of a request's head.
var (
	// errBodyTooLarge refuses a Content-Length over server.body_limit_bytes
	// before a byte of the body is read.
	errBodyTooLarge = NewClientError(http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
	errObsFold      = NewClientError(http.StatusBadRequest, "obs_fold",
		"folded header lines (obs-fold) are not accepted")
	errAmbiguousFraming = NewClientError(http.StatusBadRequest, "ambiguous_framing",
		"Transfer-Encoding with Content-Length, or on HTTP/1.0, is not accepted")
	errHopByHopIdentity = NewClientError(http.StatusBadRequest, "hop_by_hop_identity",
		"the Connection header may not name the tenant header, Authorization or Cookie")
	errVersion = &ClientError{Status: http.StatusHTTPVersionNotSupported, Code: "http_version_not_supported",
		Message: "this server speaks HTTP/1.1"}
	errMethodNotAllowed = NewClientError(http.StatusMethodNotAllowed, "method_not_allowed",
		"CONNECT and TRACE are not served")
	errMethodUnknown = &ClientError{Status: http.StatusNotImplemented, Code: "method_not_implemented",
		Message: "the method is not one this server knows (methods are case-sensitive)"}
)

// standardMethod reports the methods of RFC 9110 §9 and PATCH, which
// routes may use; CONNECT and TRACE are refused as not allowed, anything
// else (a lower-case "get", an extension method) as not implemented.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// checkHead refuses what the connection's scan found in r's head, and a
// Connection header naming an identity header: a proxy would strip the
// header it names, so the router and the cell would see different
// identities. A head net/http had buffered before its turn was not
// scanned: it is served, and the connection closed after it.
func (rs *requestScope) checkHead(r *http.Request) (closeAfter bool, err error) {
	if r.ProtoMajor != 1 {
		// "PRI * HTTP/2.0", the HTTP/2 preface, reaches handlers as a
		// request when the server does not speak HTTP/2 in clear text.
		return true, errVersion
	}
	if !standardMethod(r.Method) {
		if r.Method == http.MethodConnect || r.Method == http.MethodTrace {
			return true, errMethodNotAllowed
		}
		return true, errMethodUnknown
	}
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

// closeAfterAnswer makes the connection close once the answer is written,
// without reading what is left of the request: net/http drains up to 256
// KiB of an unread body after the handler, even when it closes, so a
// refused body would hold the connection until it arrived or read_timeout
// passed. The read deadline set now ends that drain at once.
func closeAfterAnswer(res *echo.Response) {
	res.Header().Set(echo.HeaderConnection, "close")
	_ = http.NewResponseController(res.Writer).SetReadDeadline(time.Now())
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
