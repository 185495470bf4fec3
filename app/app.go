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
	"github.com/cellgate/cellgate/internal/httpguard"
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

// SignUp writes the account on the tenant's shard and enqueues
// send_welcome in the same transaction. body is already valid (#SignUp in
// schema/app.cue). A second sign-up of an email is the database's unique
// refusal, which the runtime answers 409 already_exists (docs/errors.md
// lists every such answer).
func (a *App) SignUp(c echo.Context, r api.Request, body api.SignUp) (api.Account, error) {
	ctx, sh := c.Request().Context(), r.Shard
	var acct db.Account
	err := sh.Tx(ctx, func(tx shards.Tx) error {
		var err error
		acct, err = db.New(tx).CreateAccount(ctx, db.CreateAccountParams{
			TenantID: r.Tenant, Slot: int32(sh.Slot()), Email: body.Email, Name: deref(body.Name),
		})
		if err != nil {
			return err
		}
		_, err = a.d.Jobs.EnqueueTx(ctx, tx, jobkinds.SendWelcomeArgs{AccountID: acct.ID, Email: acct.Email})
		return err
	})
	if err != nil {
		return api.Account{}, err
	}
	// runtime.Logger carries the request, trace and tenant ids.
	runtime.Logger(c).Info("account created", "account_id", acct.ID)
	a.signups.Inc()
	return account(acct), nil
}

// GetAccount returns one account of the tenant (?id=). No such account is
// pgx.ErrNoRows, which the runtime answers 404 not_found.
func (a *App) GetAccount(c echo.Context, r api.Request, query api.AccountQuery) (api.Account, error) {
	ctx, sh := c.Request().Context(), r.Shard
	var acct db.Account
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		acct, err = db.New(conn).GetAccount(ctx, db.GetAccountParams{TenantID: r.Tenant, ID: query.ID})
		return err
	})
	if err != nil {
		return api.Account{}, err
	}
	return account(acct), nil
}

// CreateOrder adds an order to one of the tenant's accounts. An unknown
// account_id is the database's foreign-key refusal, which the runtime
// answers 422 reference_not_found.
func (a *App) CreateOrder(c echo.Context, r api.Request, body api.NewOrder) (api.Order, error) {
	ctx, sh := c.Request().Context(), r.Shard
	var o db.Order
	// In a transaction, though it is one statement: on this idempotent
	// route the stored answer commits with the order (docs/idempotency.md).
	err := sh.Tx(ctx, func(tx shards.Tx) error {
		var err error
		o, err = db.New(tx).CreateOrder(ctx, db.CreateOrderParams{
			TenantID: r.Tenant, Slot: int32(sh.Slot()), AccountID: body.AccountID, AmountCents: body.AmountCents, Note: deref(body.Note),
		})
		return err
	})
	if err != nil {
		return api.Order{}, err
	}
	return order(o), nil
}

// ListOrders pages through an account's orders (?account_id=&before=&limit=).
func (a *App) ListOrders(c echo.Context, r api.Request, query api.ListOrdersQuery) (api.OrderList, error) {
	before := int64(1<<63 - 1)
	if query.Before != nil {
		before = *query.Before
	}
	// The page sizes are the service's settings (schema/settings.cue):
	// the schema bounds limit, the setting decides this service's largest.
	limit := a.d.Settings.OrdersPageDefault
	if query.Limit != nil {
		if *query.Limit > a.d.Settings.OrdersPageMax {
			return nil, httpguard.InvalidRequest([]httpguard.FieldError{{Field: "limit", In: "query",
				Reason: "must be at most " + strconv.FormatInt(a.d.Settings.OrdersPageMax, 10)}})
		}
		limit = *query.Limit
	}
	ctx, sh := c.Request().Context(), r.Shard
	var orders []db.Order
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		orders, err = db.New(conn).ListOrders(ctx, db.ListOrdersParams{
			TenantID: r.Tenant, AccountID: query.AccountID, BeforeID: before, MaxRows: int32(limit),
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(api.OrderList, len(orders))
	for i, o := range orders {
		out[i] = order(o)
	}
	return out, nil
}

// GetOrder reads one order by the {id} path parameter of GET /orders/{id}
// (typed and validated by the spec's #OrderRef before it runs).
func (a *App) GetOrder(c echo.Context, r api.Request, params api.OrderRef) (api.Order, error) {
	ctx, sh := c.Request().Context(), r.Shard
	var o db.Order
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		o, err = db.New(conn).GetOrder(ctx, db.GetOrderParams{TenantID: r.Tenant, ID: params.ID})
		return err
	})
	if err != nil {
		return api.Order{}, err
	}
	return order(o), nil
}

// account is the API's view of an account row (no tenant or slot: they
// are the request's own).
func account(a db.Account) api.Account {
	return api.Account{ID: a.ID, Email: a.Email, Name: a.Name, CreatedAt: a.CreatedAt.Time}
}

// order is the API's view of an order row.
func order(o db.Order) api.Order {
	return api.Order{ID: o.ID, AccountID: o.AccountID, AmountCents: o.AmountCents, Note: o.Note, CreatedAt: o.CreatedAt.Time}
}

// deref is an optional string's value, "" when absent.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
