package runtime

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/shards"
)

// TestDatabaseInputErrorsAnswer4xx: the PostgreSQL errors a client's input
// causes are 4xx {error, code} for any handler that returns them, wrapped
// or not, and the answer names neither the table, the constraint nor the
// SQL; the service's own faults stay a 500.
func TestDatabaseInputErrorsAnswer4xx(t *testing.T) {
	cases := []struct {
		sqlstate string
		status   int
		code     string
	}{
		{"23505", http.StatusConflict, "already_exists"},
		{"23503", http.StatusUnprocessableEntity, "reference_not_found"},
		{"23514", http.StatusUnprocessableEntity, "value_out_of_range"},
		{"23502", http.StatusUnprocessableEntity, "value_missing"},
		{"22001", http.StatusBadRequest, "value_too_long"},
		{"54000", http.StatusBadRequest, "value_too_long"},
		{"22021", http.StatusBadRequest, "invalid_text"},
		{"22003", http.StatusBadRequest, "value_out_of_range"},
		{"22P02", http.StatusBadRequest, "invalid_value"},
		{"22007", http.StatusBadRequest, "invalid_value"},
		{"40001", http.StatusInternalServerError, "internal"}, // serialization failure: the service retries, not the client
		{"42P01", http.StatusInternalServerError, "internal"}, // the app's own SQL is wrong
	}
	s := newTestServer(t, testConfig())
	var ret error
	s.Public("POST", "/db", func(echo.Context) error { return ret })
	for _, tc := range cases {
		pe := &pgconn.PgError{Code: tc.sqlstate, Message: "secret_table detail", ConstraintName: "orders_tenant_id_account_id_fkey",
			TableName: "secret_table", Detail: "Key (tenant_id)=(acme) is not present"}
		ret = fmt.Errorf("create order: %w", pe)
		rec := serve(s, "POST", "/db", "")
		var body problemBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", tc.sqlstate, rec.Body, err)
		}
		if rec.Code != tc.status || body.Code != tc.code || body.Detail == "" {
			t.Errorf("%s: %d %+v, want %d %s", tc.sqlstate, rec.Code, body, tc.status, tc.code)
		}
		for _, leak := range []string{"secret_table", "fkey", "acme", "Key ("} {
			if strings.Contains(rec.Body.String(), leak) {
				t.Errorf("%s: answer leaks %q: %s", tc.sqlstate, leak, rec.Body)
			}
		}
	}
	ret = fmt.Errorf("get account: %w", pgx.ErrNoRows)
	if rec := serve(s, "POST", "/db", ""); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"code":"not_found"`) {
		t.Errorf("pgx.ErrNoRows: %d %s", rec.Code, rec.Body)
	}
}

// TestOnlyStandardStatusesOnTheWire: a handler's HTTPError with a status no
// RFC names (499) is answered 500; a standard one keeps its status and gets
// a code from its status text.
func TestOnlyStandardStatusesOnTheWire(t *testing.T) {
	s := newTestServer(t, testConfig())
	code := 499
	s.Public("GET", "/status", func(echo.Context) error { return echo.NewHTTPError(code, "x") })
	if rec := serve(s, "GET", "/status", ""); rec.Code != http.StatusInternalServerError {
		t.Errorf("499: answered %d, want 500", rec.Code)
	}
	code = http.StatusTeapot
	if rec := serve(s, "GET", "/status", ""); rec.Code != http.StatusTeapot || !strings.Contains(rec.Body.String(), `"code":"im_a_teapot"`) {
		t.Errorf("418: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(s, "GET", "/nowhere", ""); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"code":"not_found"`) {
		t.Errorf("unknown route: %d %s", rec.Code, rec.Body)
	}
}

// TestCheckoutWithoutTenantIs401: a handler whose checkout fails for want
// of a tenant (tenancy off, or a route that lost it) answers the tenancy's
// 401 tenant_missing, not a 500.
func TestCheckoutWithoutTenantIs401(t *testing.T) {
	s := newTestServer(t, testConfig())
	s.Public("GET", "/nobody", func(c echo.Context) error {
		return fmt.Errorf("list orders: %w", shards.ErrNoTenant)
	})
	rec := serve(s, "GET", "/nobody", "")
	var body problemBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if rec.Code != http.StatusUnauthorized || body.Code != "tenant_missing" {
		t.Errorf("got %d %+v, want 401 tenant_missing", rec.Code, body)
	}
}
