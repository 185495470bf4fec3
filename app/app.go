// Package app is the example service's hand-written code: the handlers of
// the routes in schema/app.cue (App, which implements gen/api.Handler),
// their middleware (App.Middleware), metrics and settings, and the workers
// of its job kinds (Workers, which implements gen/jobkinds.Workers). It is
// the only Go a user of the template writes; everything it builds on is
// either generated (gen/) or the cellgate core (internal/).
//
// Concurrency: an App and a Workers are built once at boot and their
// methods run concurrently; their only mutable state is their metrics,
// which are safe for concurrent use.
package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/settings"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// Deps are what the handlers need from the runtime besides each request's
// api.Request (its tenant and the accessor to the tenant's shard).
type Deps struct {
	// Jobs enqueues jobs, on their own or in a shard transaction.
	Jobs jobs.Enqueuer
	// Log is the structured logger.
	Log *slog.Logger
	// Settings are the service's own settings (schema/settings.cue), as the
	// cell runs them: the spec's, then its per-cell file's.
	Settings settings.Settings
	// Metrics is the server's registry (served at /metrics); New registers
	// the app's metrics in it. nil: a registry of the app's own, unserved.
	Metrics prometheus.Registerer
}

// App implements api.Handler.
type App struct {
	d       Deps
	signups prometheus.Counter
}

var _ api.Handler = (*App)(nil)

// New returns the example app, its metrics registered in d.Metrics.
func New(d Deps) (*App, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = prometheus.NewRegistry()
	}
	a := &App{d: d, signups: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "example_signups_total",
		Help: "Accounts created by POST /signup (its transaction committed), all tenants together.",
	})}
	if err := d.Metrics.Register(a.signups); err != nil {
		return nil, fmt.Errorf("app metrics: %w", err)
	}
	return a, nil
}

// Middleware is the app's own middleware, which api.Register wraps around
// the spec's routes: every tenant route answers with Cache-Control:
// private, no-store, so no shared cache between the client and the cell
// keeps one tenant's data.
func (a *App) Middleware() api.Middleware {
	return api.Middleware{Tenant: []echo.MiddlewareFunc{noStore}}
}

// noStore sets Cache-Control before the handler writes its answer.
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "private, no-store")
		return next(c)
	}
}

// Index describes the service (public).
func (a *App) Index(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{
		"service": "cellgate example",
		"routes":  api.Routes,
	})
}

// signUpRequest is the body of POST /signup.
type signUpRequest struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// Field limits of the example's bodies, in bytes. The database would refuse
// an email too long for its unique index (and the runtime answer 400), but
// a limit the client can read in the answer is better than a database error.
const (
	maxEmailBytes = 254 // the longest address SMTP carries (RFC 5321)
	maxNameBytes  = 200
	maxNoteBytes  = 2000
)

func (r signUpRequest) validate() error {
	switch {
	case r.Email == "":
		return runtime.BadBody(nil, "email is required")
	case len(r.Email) > maxEmailBytes:
		return runtime.BadBody(nil, fmt.Sprintf("email must be at most %d bytes", maxEmailBytes))
	case len(r.Name) > maxNameBytes:
		return runtime.BadBody(nil, fmt.Sprintf("name must be at most %d bytes", maxNameBytes))
	}
	return nil
}

// SignUp writes the account on the tenant's shard and enqueues
// send_welcome in the same transaction. A second sign-up of an email is the
// database's unique refusal, which the runtime answers 409 already_exists
// (docs/errors.md lists every such answer).
func (a *App) SignUp(c echo.Context, r api.Request) error {
	var req signUpRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	ctx, sh := c.Request().Context(), r.Shard
	var acct db.Account
	err := sh.Tx(ctx, func(tx shards.Tx) error {
		var err error
		acct, err = db.New(tx).CreateAccount(ctx, db.CreateAccountParams{
			TenantID: r.Tenant, Slot: int32(sh.Slot()), Email: req.Email, Name: req.Name,
		})
		if err != nil {
			return err
		}
		_, err = a.d.Jobs.EnqueueTx(ctx, tx, jobkinds.SendWelcomeArgs{AccountID: acct.ID, Email: acct.Email})
		return err
	})
	if err != nil {
		return err
	}
	a.signups.Inc()
	return c.JSON(http.StatusCreated, acct)
}

// GetAccount returns one account of the tenant (?id=). No such account is
// pgx.ErrNoRows, which the runtime answers 404 not_found.
func (a *App) GetAccount(c echo.Context, r api.Request) error {
	id, err := strconv.ParseInt(c.QueryParam("id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "query parameter id must be an integer")
	}
	ctx, sh := c.Request().Context(), r.Shard
	var acct db.Account
	err = sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		acct, err = db.New(conn).GetAccount(ctx, db.GetAccountParams{TenantID: r.Tenant, ID: id})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, acct)
}

// createOrderRequest is the body of POST /orders.
type createOrderRequest struct {
	AccountID   int64  `json:"account_id"`
	AmountCents int64  `json:"amount_cents"`
	Note        string `json:"note"`
}

// CreateOrder adds an order to one of the tenant's accounts. An unknown
// account_id is the database's foreign-key refusal, which the runtime
// answers 422 reference_not_found.
func (a *App) CreateOrder(c echo.Context, r api.Request) error {
	var req createOrderRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	switch {
	case req.AccountID <= 0:
		return runtime.BadBody(nil, "account_id must be > 0")
	case req.AmountCents < 0:
		return runtime.BadBody(nil, "amount_cents must be >= 0")
	case len(req.Note) > maxNoteBytes:
		return runtime.BadBody(nil, fmt.Sprintf("note must be at most %d bytes", maxNoteBytes))
	}
	ctx, sh := c.Request().Context(), r.Shard
	var o db.Order
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		o, err = db.New(conn).CreateOrder(ctx, db.CreateOrderParams{
			TenantID: r.Tenant, Slot: int32(sh.Slot()), AccountID: req.AccountID, AmountCents: req.AmountCents, Note: req.Note,
		})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, o)
}

// ListOrders pages through an account's orders (?account_id=&before=&limit=).
func (a *App) ListOrders(c echo.Context, r api.Request) error {
	acct, err := strconv.ParseInt(c.QueryParam("account_id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "query parameter account_id must be an integer")
	}
	before := int64(1<<63 - 1)
	if s := c.QueryParam("before"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "query parameter before must be an integer")
		}
	}
	// The page sizes are the service's settings (schema/settings.cue).
	limit, maxLimit := int32(a.d.Settings.OrdersPageDefault), int(a.d.Settings.OrdersPageMax)
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("query parameter limit must be 1..%d", maxLimit))
		}
		limit = int32(n)
	}
	ctx, sh := c.Request().Context(), r.Shard
	var orders []db.Order
	err = sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		orders, err = db.New(conn).ListOrders(ctx, db.ListOrdersParams{
			TenantID: r.Tenant, AccountID: acct, BeforeID: before, MaxRows: limit,
		})
		return err
	})
	if err != nil {
		return err
	}
	if orders == nil {
		orders = []db.Order{}
	}
	return c.JSON(http.StatusOK, orders)
}

// GetOrder reads one order by the {id} path parameter of GET /orders/{id}.
func (a *App) GetOrder(c echo.Context, r api.Request) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return echo.NewHTTPError(http.StatusBadRequest, "path parameter id must be a positive integer")
	}
	ctx, sh := c.Request().Context(), r.Shard
	var o db.Order
	err = sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		o, err = db.New(conn).GetOrder(ctx, db.GetOrderParams{TenantID: r.Tenant, ID: id})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}
