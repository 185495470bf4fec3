package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/labstack/echo/v4"
)

// Binder is the server's echo.Binder: path parameters and (for GET,
// DELETE and HEAD) query parameters as Echo's DefaultBinder binds them,
// and the body as JSON only, through BindJSON. Echo's own binder also
// takes XML and form bodies, so a route meant for JSON would take input
// its validation never saw, and it leaves data after the JSON value
// unread. Every c.Bind of a cellgate handler goes through it.
//
// Concurrency: stateless; one Binder serves every request.
type Binder struct {
	echo.DefaultBinder
}

// Bind binds path and query parameters as Echo does, then the body with
// BindJSON. Its errors are *ClientError values: return them as they are.
func (b *Binder) Bind(i any, c echo.Context) error {
	if err := b.BindPathParams(c, i); err != nil {
		return err
	}
	switch c.Request().Method {
	case http.MethodGet, http.MethodDelete, http.MethodHead:
		if err := b.BindQueryParams(c, i); err != nil {
			return err
		}
	}
	return BindJSON(c.Request(), i)
}

// BindJSON decodes r's body, a single JSON value, into v. No body (length
// 0, or an empty chunked body) leaves v as it is, for the handler's own
// validation to judge. Otherwise it refuses, as a *ClientError:
//   - a Content-Type other than application/json or application/*+json
//     (charset, when given, utf-8): 415 unsupported_media_type;
//   - a body that is not JSON or does not fit v: 400 invalid_json;
//   - anything but white space after the value: 400 trailing_data, so
//     `{"a":1}{"a":2}` is never read as its first half;
//   - a body over server.body_limit_bytes (413) or too slow (408), kept as
//     the cause, which the error handler answers.
func BindJSON(r *http.Request, v any) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if err := checkJSONType(r.Header.Get(echo.HeaderContentType)); err != nil {
		return err
	}
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty chunked body: no body
		}
		return jsonError(err)
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil && readError(err):
		return jsonError(err)
	default:
		return &ClientError{Status: http.StatusBadRequest, Code: "trailing_data",
			Message: "body has data after the JSON value", Err: err}
	}
}

// checkJSONType refuses a media type that is not JSON.
func checkJSONType(ct string) error {
	mt, params, err := mime.ParseMediaType(ct)
	ok := err == nil && (mt == echo.MIMEApplicationJSON ||
		(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")))
	if cs, has := params["charset"]; ok && has && !strings.EqualFold(cs, "utf-8") {
		ok = false
	}
	if !ok {
		return &ClientError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: "body must be application/json (UTF-8)"}
	}
	return nil
}

// readError reports an error of reading the body (over the limit, too
// slow, the connection lost) rather than of its content.
func readError(err error) bool {
	var syn *json.SyntaxError
	return !errors.As(err, &syn) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// jsonError is the *ClientError of a failed Decode; the cause stays
// inside, so a read error is still answered by what it is (413, 408).
func jsonError(err error) error {
	msg := "body is not valid JSON"
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		msg = fmt.Sprintf("field %s must be %s", te.Field, jsonKind(te.Type))
	}
	return &ClientError{Status: http.StatusBadRequest, Code: "invalid_json", Message: msg, Err: err}
}

// jsonKind names the JSON a Go type takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
