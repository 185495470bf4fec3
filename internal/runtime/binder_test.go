package runtime

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

type bindTarget struct {
	AccountID int64  `json:"account_id"`
	Note      string `json:"note"`
}

// TestBinderAcceptsOnlyOneJSONValue drives c.Bind through the server with
// the bodies a hostile or careless client sends.
func TestBinderAcceptsOnlyOneJSONValue(t *testing.T) {
	cfg := testConfig()
	cfg.Server.BodyLimitBytes = 64
	s := newTestServer(t, cfg)
	s.Public("POST", "/bind", func(c echo.Context) error {
		var v bindTarget
		if err := c.Bind(&v); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, v)
	})
	cases := []struct {
		name, ctype, body string
		chunked           bool
		status            int
		code              string
	}{
		{"one value", "application/json", `{"account_id":7}`, false, 200, ""},
		{"trailing white space", "application/json", "{\"account_id\":7}\r\n \t", false, 200, ""},
		{"charset utf-8", "application/json; charset=UTF-8", `{"account_id":7}`, false, 200, ""},
		{"+json suffix", "application/merge-patch+json", `{"account_id":7}`, false, 200, ""},
		{"no body", "", ``, false, 200, ""},
		{"empty chunked body", "application/json", ``, true, 200, ""},
		{"second value", "application/json", `{"account_id":7}{"account_id":8}`, false, 400, "trailing_data"},
		{"trailing garbage", "application/json", `{"account_id":7} x`, false, 400, "trailing_data"},
		{"trailing brace", "application/json", `{"account_id":7}}`, false, 400, "trailing_data"},
		{"second value chunked", "application/json", `{"account_id":7} 1`, true, 400, "trailing_data"},
		{"not JSON", "application/json", `{"account_id":`, false, 400, "invalid_json"},
		{"wrong type", "application/json", `{"account_id":"7"}`, false, 400, "invalid_json"},
		{"text/plain", "text/plain", `{"account_id":7}`, false, 415, "unsupported_media_type"},
		{"no content type", "", `{"account_id":7}`, false, 415, "unsupported_media_type"},
		{"form", "application/x-www-form-urlencoded", `account_id=7`, false, 415, "unsupported_media_type"},
		{"xml", "application/xml", `<a><account_id>7</account_id></a>`, false, 415, "unsupported_media_type"},
		{"latin-1", "application/json; charset=iso-8859-1", `{"account_id":7}`, false, 415, "unsupported_media_type"},
		{"malformed type", "application/json; charset", `{"account_id":7}`, false, 415, "unsupported_media_type"},
		{"over the limit chunked", "application/json", `{"note":"` + strings.Repeat("x", 80) + `"}`, true, 413, "body_too_large"},
		{"over the limit behind trailing data", "application/json", `{}` + strings.Repeat(" ", 80), true, 413, "body_too_large"},
	}
	for _, tc := range cases {
		req := httptest.NewRequest("POST", "/bind", strings.NewReader(tc.body))
		if tc.chunked {
			req.ContentLength = -1
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		rec := httptest.NewRecorder()
		s.Echo().ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.status)
			continue
		}
		if tc.code != "" {
			var b problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Code != tc.code || b.Detail == "" {
				t.Errorf("%s: body %s, want code %s", tc.name, rec.Body, tc.code)
			}
		}
	}
}

// TestBinderNamesTheField: a type mismatch says which field and what it
// takes, in JSON's words, not Go's.
func TestBinderNamesTheField(t *testing.T) {
	req := httptest.NewRequest("POST", "/", strings.NewReader(`{"account_id":"seven"}`))
	req.Header.Set("Content-Type", "application/json")
	var v bindTarget
	err := BindJSON(req, &v)
	a := errorStatus(err)
	if a.status != 400 || a.msg != "field account_id must be an integer" {
		t.Fatalf("%+v", a)
	}
}
