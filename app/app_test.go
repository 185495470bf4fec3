package app_test

// Handler tests: the real server (tenancy, bulkheads, error mapping) in
// front of the app, on databases of the test's own (celltest.Start), driven
// with httptest. Copy this file's newServer to test your own handlers.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/app"
	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/celltest"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/runtime/idempotency"
	"github.com/cellgate/cellgate/internal/shards"
	cgsql "github.com/cellgate/cellgate/sql"
)

// newServer starts a cell (fresh, migrated databases of this test's) and
// the app behind the runtime's middleware, as cmd/server wires them.
func newServer(t *testing.T) (*celltest.Cell, http.Handler) {
	t.Helper()
	cell := celltest.Start(t, spec.Config(), celltest.Options{Migrate: cgsql.Migrate})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := runtime.New(cell.Config, runtime.Options{Logger: log, Getenv: cell.Getenv, Shards: cell.Shards})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(srv, app.New(app.Deps{Jobs: cell.Jobs, Log: log}))
	return cell, srv.Echo()
}

// do sends one request as tenant (none for ""), returning the status and body.
func do(t *testing.T, h http.Handler, tenant, method, target, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

// TestSignUpEnqueuesWelcome: the account and its send_welcome job are
// written in one transaction; a second sign-up with the same email is 409
// and enqueues nothing more.
func TestSignUpEnqueuesWelcome(t *testing.T) {
	t.Parallel()
	cell, h := newServer(t)
	code, body := do(t, h, "acme", "POST", "/signup", `{"email":"a@acme.test","name":"A"}`)
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %s", code, body)
	}
	acct := decode[api.Account](t, body)
	if acct.Email != "a@acme.test" || acct.Name != "A" || acct.ID <= 0 || acct.CreatedAt.IsZero() {
		t.Fatalf("signup returned %+v", acct)
	}
	job := celltest.RequireEnqueued(t, cell, "acme", &jobkinds.SendWelcomeArgs{AccountID: acct.ID, Email: "a@acme.test"})
	if job.MaxAttempts != jobkinds.SendWelcome.MaxAttempts {
		t.Errorf("job max_attempts %d, want the spec's %d", job.MaxAttempts, jobkinds.SendWelcome.MaxAttempts)
	}

	if code, body := do(t, h, "acme", "POST", "/signup", `{"email":"a@acme.test"}`); code != http.StatusConflict {
		t.Fatalf("second signup: %d %s, want 409", code, body)
	}
	// Still exactly one send_welcome job: the failed transaction took its
	// job with it.
	celltest.RequireEnqueued[jobkinds.SendWelcomeArgs](t, cell, "acme", nil)
}

// TestSignUpRefusals: a bad body is 400 and no tenant is 401 (tenancy
// middleware); neither writes a job.
func TestSignUpRefusals(t *testing.T) {
	t.Parallel()
	cell, h := newServer(t)
	for _, tc := range []struct {
		tenant, body string
		want         int
	}{
		{"acme", `{"name":"no email"}`, http.StatusBadRequest},
		{"acme", `{"email":"not an address"}`, http.StatusBadRequest},
		{"acme", `{"email":"a@acme.test","admin":true}`, http.StatusBadRequest},
		{"acme", `not json`, http.StatusBadRequest},
		{"", `{"email":"a@acme.test"}`, http.StatusUnauthorized},
	} {
		if code, body := do(t, h, tc.tenant, "POST", "/signup", tc.body); code != tc.want {
			t.Errorf("tenant %q body %s: %d %s, want %d", tc.tenant, tc.body, code, body, tc.want)
		}
	}
	cell.JobsTx(t, "acme", func(tx shards.Tx) {
		celltest.RequireNotEnqueuedTx[jobkinds.SendWelcomeArgs](t, tx, nil)
	})
}

// TestAccountsAreTenantScoped: a tenant finds its own account and gets 404
// for another tenant's id, though both tenants may share a shard.
func TestAccountsAreTenantScoped(t *testing.T) {
	t.Parallel()
	_, h := newServer(t)
	_, body := do(t, h, "acme", "POST", "/signup", `{"email":"a@acme.test"}`)
	acct := decode[api.Account](t, body)
	path := "/account?id=" + strconv.FormatInt(acct.ID, 10)
	if code, body := do(t, h, "acme", "GET", path, ""); code != http.StatusOK || decode[api.Account](t, body).ID != acct.ID {
		t.Fatalf("own account: %d %s", code, body)
	}
	if code, body := do(t, h, "globex", "GET", path, ""); code != http.StatusNotFound {
		t.Fatalf("another tenant's account: %d %s, want 404", code, body)
	}
	if code, _ := do(t, h, "acme", "GET", "/account?id=x", ""); code != http.StatusBadRequest {
		t.Fatalf("non-integer id: %d, want 400", code)
	}
}

// TestOrders: orders page newest first, per account and tenant.
func TestOrders(t *testing.T) {
	t.Parallel()
	_, h := newServer(t)
	_, body := do(t, h, "acme", "POST", "/signup", `{"email":"a@acme.test"}`)
	acct := decode[api.Account](t, body)
	for i := range 3 {
		req := `{"account_id":` + strconv.FormatInt(acct.ID, 10) + `,"amount_cents":` + strconv.Itoa(100*(i+1)) + `}`
		if code, body := do(t, h, "acme", "POST", "/orders", req); code != http.StatusCreated {
			t.Fatalf("order %d: %d %s", i, code, body)
		}
	}
	list := "/orders?account_id=" + strconv.FormatInt(acct.ID, 10)
	code, body := do(t, h, "acme", "GET", list+"&limit=2", "")
	orders := decode[api.OrderList](t, body)
	if code != http.StatusOK || len(orders) != 2 || orders[0].AmountCents != 300 || orders[1].AmountCents != 200 {
		t.Fatalf("first page: %d %s", code, body)
	}
	code, body = do(t, h, "acme", "GET", list+"&before="+strconv.FormatInt(orders[1].ID, 10), "")
	if rest := decode[api.OrderList](t, body); code != http.StatusOK || len(rest) != 1 || rest[0].AmountCents != 100 {
		t.Fatalf("second page: %d %s", code, body)
	}
	if code, body := do(t, h, "globex", "GET", list, ""); code != http.StatusOK || body != "[]\n" {
		t.Fatalf("another tenant's orders: %d %q, want 200 []", code, body)
	}
	if code, _ := do(t, h, "acme", "GET", list+"&limit=0", ""); code != http.StatusBadRequest {
		t.Fatalf("limit=0: %d, want 400", code)
	}
}

// TestCreateOrderIsIdempotent: POST /orders is idempotent in the spec; a
// retry with the same Idempotency-Key replays the first answer and adds
// no second order, another body under the key is 422.
func TestCreateOrderIsIdempotent(t *testing.T) {
	t.Parallel()
	// The keys table is the runtime's: cmd/server migrates it on every
	// shard beside the app's tables.
	cell := celltest.Start(t, spec.Config(), celltest.Options{Migrate: func(ctx context.Context, dsn string) error {
		if err := cgsql.Migrate(ctx, dsn); err != nil {
			return err
		}
		return idempotency.Files.Up(ctx, dsn)
	}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := runtime.New(cell.Config, runtime.Options{Logger: log, Getenv: cell.Getenv, Shards: cell.Shards})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(srv, app.New(app.Deps{Jobs: cell.Jobs, Log: log}))
	h := srv.Echo()
	_, body := do(t, h, "acme", "POST", "/signup", `{"email":"i@acme.test"}`)
	acct := decode[api.Account](t, body)
	order := `{"account_id":` + strconv.FormatInt(acct.ID, 10) + `,"amount_cents":500}`
	post := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant-ID", "acme")
		req.Header.Set(idempotency.Header, "order-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first, again := post(order), post(order)
	if first.Code != http.StatusCreated || again.Code != http.StatusCreated || again.Header().Get(idempotency.ReplayedHeader) != "true" || again.Body.String() != first.Body.String() {
		t.Fatalf("first %d %s, retry %d %q %s", first.Code, first.Body, again.Code, again.Header().Get(idempotency.ReplayedHeader), again.Body)
	}
	if code, body := do(t, h, "acme", "GET", "/orders?account_id="+strconv.FormatInt(acct.ID, 10), ""); code != http.StatusOK || len(decode[api.OrderList](t, body)) != 1 {
		t.Fatalf("orders: %d %s", code, body)
	}
	if other := post(`{"account_id":` + strconv.FormatInt(acct.ID, 10) + `,"amount_cents":600}`); other.Code != http.StatusUnprocessableEntity {
		t.Fatalf("another body: %d %s", other.Code, other.Body)
	}
}

// TestInvalidBodyNamesEveryField: the generated validation answers 400
// invalid_request with every failing field of the body, before the handler.
func TestInvalidBodyNamesEveryField(t *testing.T) {
	t.Parallel()
	_, h := newServer(t)
	code, body := do(t, h, "acme", "POST", "/orders", `{"account_id":0,"amount_cents":-5,"note":"`+strings.Repeat("n", 2001)+`"}`)
	p := decode[struct {
		Code   string
		Errors []struct{ Field, In, Reason string }
	}](t, body)
	if code != http.StatusBadRequest || p.Code != "invalid_request" {
		t.Fatalf("%d %s, want 400 invalid_request", code, body)
	}
	got := map[string]string{}
	for _, e := range p.Errors {
		got[e.Field] = e.Reason
	}
	want := map[string]string{"account_id": "must be greater than 0", "amount_cents": "must be at least 0", "note": "must be at most 2000 characters"}
	for f, r := range want {
		if got[f] != r {
			t.Errorf("field %s: reason %q, want %q (all: %s)", f, got[f], r, body)
		}
	}
	if len(p.Errors) != len(want) {
		t.Errorf("%d errors, want %d: %s", len(p.Errors), len(want), body)
	}
}
