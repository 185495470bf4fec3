package httpguard

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of every refusal (RFC 9457 §3).
const ContentType = "application/problem+json"

// Problem is one refusal: an RFC 9457 problem details object with the
// members type ("about:blank": the status says what kind of problem it
// is), title (the status text), status and detail, plus code, a stable
// machine-readable name that clients switch on. It is an error, so
// handlers and middleware can return one.
type Problem struct {
	// Status is the HTTP status.
	Status int
	// Code is the stable machine-readable name, e.g. "obs_fold".
	Code string
	// Detail is the human-readable explanation sent to the client.
	Detail string
	// RetryAfter is the Retry-After header in whole seconds; 0 sends none.
	RetryAfter int
	// Errors lists the failing fields of an invalid_request problem.
	Errors []FieldError

	// Encoded once: a refusal is the path a hostile client hammers.
	body       []byte
	retryAfter []string
}

// body is the JSON object, members in the RFC's order.
type body struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Code   string       `json:"code"`
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one failing field of a request that did not validate: the
// errors member of an invalid_request problem.
type FieldError struct {
	// Field is the field's path: "email", "lines[2].sku"; for a query
	// parameter its name.
	Field string `json:"field"`
	// In is where the field is: "body", "path" or "query".
	In string `json:"in"`
	// Reason says what is wrong with it, e.g. "must be at most 254 characters".
	Reason string `json:"reason"`
}

// InvalidRequest is the 400 of a request whose body or query parameters
// do not match the route's schema: code invalid_request, every failing
// field in the errors member.
func InvalidRequest(errs []FieldError) *Problem {
	detail := "1 field is invalid"
	if len(errs) != 1 {
		detail = strconv.Itoa(len(errs)) + " fields are invalid"
	}
	b, _ := json.Marshal(body{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest),
		Status: http.StatusBadRequest, Detail: detail, Code: CodeInvalidRequest, Errors: errs}) // strings and ints cannot fail
	return &Problem{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Detail: detail, Errors: errs, body: append(b, '\n')}
}

// CodeInvalidRequest is the code of InvalidRequest's problems.
const CodeInvalidRequest = "invalid_request"

// NewProblem builds a Problem and encodes its body. A status no RFC
// defines is a programming error: it panics.
func NewProblem(status int, code, detail string) *Problem {
	return NewRetryProblem(status, 0, code, detail)
}

// NewRetryProblem is NewProblem with a Retry-After of retryAfter seconds
// (0: none).
func NewRetryProblem(status, retryAfter int, code, detail string) *Problem {
	if http.StatusText(status) == "" {
		panic("httpguard: status " + strconv.Itoa(status) + " of problem " + code + " is not a standard status")
	}
	p := &Problem{Status: status, Code: code, Detail: detail, RetryAfter: retryAfter, body: Encode(status, code, detail)}
	if retryAfter > 0 {
		p.retryAfter = []string{strconv.Itoa(retryAfter)}
	}
	return p
}

// Encode returns the problem details body for status, code and detail,
// with a trailing newline.
func Encode(status int, code, detail string) []byte {
	b, _ := json.Marshal(body{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code}) // strings and an int cannot fail
	return append(b, '\n')
}

// Error implements error.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// Body returns the encoded body; the caller must not modify it.
func (p *Problem) Body() []byte { return p.body }

// Write answers w with the problem. A HEAD request (head true) gets the
// status and headers only.
func (p *Problem) Write(w http.ResponseWriter, head bool) {
	h := w.Header()
	h["Content-Type"] = contentType
	if p.retryAfter != nil {
		h["Retry-After"] = p.retryAfter
	}
	if head {
		w.WriteHeader(p.Status)
		return
	}
	h["Content-Length"] = []string{strconv.Itoa(len(p.body))}
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.body)
}

// contentType is shared by reference, never modified.
var contentType = []string{ContentType}

// The refusals of the edge, shared by the cell and the router. Their
// codes are stable API (docs/errors.md).
var (
	// ErrObsFold: a folded header line (RFC 9112 §5.2).
	ErrObsFold = NewProblem(http.StatusBadRequest, "obs_fold",
		"folded header lines (obs-fold) are not accepted")
	// ErrAmbiguousFraming: Transfer-Encoding with Content-Length, or on
	// HTTP/1.0 (RFC 9112 §6.1).
	ErrAmbiguousFraming = NewProblem(http.StatusBadRequest, "ambiguous_framing",
		"Transfer-Encoding with Content-Length, or on HTTP/1.0, is not accepted")
	// ErrUnscanned: a head the connection's scan could not follow (after
	// a body it could not frame, or too many pipelined heads).
	ErrUnscanned = NewProblem(http.StatusBadRequest, "unscanned_head",
		"the request's framing could not be checked")
	// ErrHopByHopIdentity: a Connection header naming a header that
	// carries identity; a proxy would drop it and another identity would
	// reach the next hop.
	ErrHopByHopIdentity = NewProblem(http.StatusBadRequest, "hop_by_hop_identity",
		"the Connection header may not name the tenant header, Authorization or Cookie")
	// ErrVersion: any protocol but HTTP/1.x (the HTTP/2 preface included).
	ErrVersion = NewProblem(http.StatusHTTPVersionNotSupported, "http_version_not_supported",
		"this server speaks HTTP/1.1")
	// ErrMethodNotAllowed: CONNECT and TRACE.
	ErrMethodNotAllowed = NewProblem(http.StatusMethodNotAllowed, "method_not_allowed",
		"CONNECT and TRACE are not served")
	// ErrMethodUnknown: a method that is not an upper-case token (methods
	// are case-sensitive: "get" is not GET).
	ErrMethodUnknown = NewProblem(http.StatusNotImplemented, "method_not_implemented",
		"the method is not one this server knows (methods are case-sensitive)")
	// ErrBodyTooLarge: a body over the server's limit.
	ErrBodyTooLarge = NewProblem(http.StatusRequestEntityTooLarge, "body_too_large",
		"request body too large")
	// ErrBodyTooSlow: a body that missed its deadline or minimum rate.
	ErrBodyTooSlow = NewProblem(http.StatusRequestTimeout, "body_too_slow",
		"request body not received in time")
	// ErrBodyMalformed: a body that ended early or whose chunks are
	// malformed.
	ErrBodyMalformed = NewProblem(http.StatusBadRequest, "bad_request_body",
		"the request body is malformed or incomplete")
)
