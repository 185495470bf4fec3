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

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cellgate/cellgate/app"
	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/settings"
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
	cell, h, _ := newServerWith(t, nil)
	return cell, h
}

// newServerWith is newServer with edit applied to the app's Deps (its
// settings, say) before app.New; it also returns the server's registry.
func newServerWith(t *testing.T, edit func(*app.Deps)) (*celltest.Cell, http.Handler, *prometheus.Registry) {
	t.Helper()
	cell := celltest.Start(t, spec.Config(), celltest.Options{Migrate: cgsql.Migrate})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := runtime.New(cell.Config, runtime.Options{Logger: log, Getenv: cell.Getenv, Shards: cell.Shards})
	if err != nil {
		t.Fatal(err)
	}
	st, err := settings.From(cell.Config)
	if err != nil {
		t.Fatal(err)
	}
	d := app.Deps{Jobs: cell.Jobs, Log: log, Settings: st, Metrics: srv.Registry()}
	if edit != nil {
		edit(&d)
	}
	a, err := app.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Register(srv, a, a.Middleware()); err != nil {
		t.Fatal(err)
	}
	return cell, srv.Echo(), srv.Registry()
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
	st, err := settings.From(cell.Config)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(app.Deps{Jobs: cell.Jobs, Log: log, Settings: st, Metrics: srv.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Register(srv, a, a.Middleware()); err != nil {
		t.Fatal(err)
	}
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

// TestExtensions: the example's extension points, as cmd/server wires
// them: its middleware marks tenant answers no-store (not the public
// index), its counter in the server's registry counts sign-ups, and its
// settings bound GET /orders' limit.
func TestExtensions(t *testing.T) {
	t.Parallel()
	_, h, reg := newServerWith(t, func(d *app.Deps) { d.Settings.OrdersPageMax = 3 })
	req := httptest.NewRequest("POST", "/signup", strings.NewReader(`{"email":"x@acme.test","name":"X"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant-ID", "acme")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || rec.Header().Get("Cache-Control") != "private, no-store" {
		t.Errorf("signup: %d, Cache-Control %q; want 201 and private, no-store", rec.Code, rec.Header().Get("Cache-Control"))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "" {
		t.Errorf("public index: %d, Cache-Control %q; want 200 and none (the middleware is for tenant routes)", rec.Code, rec.Header().Get("Cache-Control"))
	}
	if n, err := testutil.GatherAndCount(reg, "example_signups_total"); err != nil || n != 1 {
		t.Fatalf("example_signups_total in the server's registry: %d series, %v", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "example_signups_total" && mf.GetMetric()[0].GetCounter().GetValue() != 1 {
			t.Errorf("example_signups_total = %v after one sign-up, want 1", mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	acct := decode[api.Account](t, signUpY(t, h))
	code, body := do(t, h, "acme", "GET", "/orders?account_id="+strconv.FormatInt(acct.ID, 10)+"&limit=4", "")
	if code != http.StatusBadRequest || !strings.Contains(body, "must be at most 3") {
		t.Errorf("limit=4 with orders_page_max 3: %d %s; want 400 naming the limit of 3", code, body)
	}
	if code, body := do(t, h, "acme", "GET", "/orders?account_id="+strconv.FormatInt(acct.ID, 10)+"&limit=3", ""); code != http.StatusOK {
		t.Errorf("limit=3 with orders_page_max 3: %d %s; want 200", code, body)
	}
}

// signUpY signs up one more account of acme and returns the answer's body.
func signUpY(t *testing.T, h http.Handler) string {
	t.Helper()
	code, body := do(t, h, "acme", "POST", "/signup", `{"email":"y@acme.test","name":"Y"}`)
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %s", code, body)
	}
	return body
}

// TestRegisterRefusesUnknownGroup: middleware for a group no spec route
// has is a boot error naming the group, not middleware that never runs.
func TestRegisterRefusesUnknownGroup(t *testing.T) {
	t.Parallel()
	a, err := app.New(app.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var routes int
	err = api.Register(countRouter{&routes}, a, api.Middleware{Groups: map[string][]echo.MiddlewareFunc{"nope": nil}})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || routes != 0 {
		t.Fatalf("Register with group nope: %v, %d routes added; want an error naming it and none added", err, routes)
	}
	if err := api.Register(countRouter{&routes}, a, a.Middleware()); err != nil || routes != len(api.Routes) {
		t.Fatalf("Register with the app's middleware: %v, %d routes; want %d", err, routes, len(api.Routes))
	}
}

// countRouter counts the routes Register adds.
type countRouter struct{ n *int }

func (r countRouter) Public(string, string, echo.HandlerFunc, ...echo.MiddlewareFunc) { *r.n++ }
func (r countRouter) Tenant(string, string, func(echo.Context, shards.Accessor) error, ...echo.MiddlewareFunc) {
	*r.n++
}
func (r countRouter) Idempotent(string, string, func(echo.Context, shards.Accessor) error, ...echo.MiddlewareFunc) {
	*r.n++
}
