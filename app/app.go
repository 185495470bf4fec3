// Package app is the example service's hand-written code: the handlers of
// the routes in schema/app.cue (App, which implements gen/api.Handler) and
// the workers of its job kinds (Workers, which implements
// gen/jobkinds.Workers). It is the only Go a user of the template writes;
// everything it builds on is either generated (gen/) or the cellgate core
// (internal/).
//
// Concurrency: an App and a Workers are built once at boot and their
// methods run concurrently; they hold no mutable state of their own.
package app

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
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
}

// App implements api.Handler.
type App struct {
	d Deps
}

var _ api.Handler = (*App)(nil)

// New returns the example app.
func New(d Deps) *App {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &App{d: d}
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
	ctx, sh := c.Request().Context(), r.Shard
	var orders []db.Order
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		orders, err = db.New(conn).ListOrders(ctx, db.ListOrdersParams{
			TenantID: r.Tenant, AccountID: query.AccountID, BeforeID: before, MaxRows: int32(query.Limit),
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

// GetOrder reads one order by the {id} path parameter of GET /orders/{id}.
func (a *App) GetOrder(c echo.Context, r api.Request) (api.Order, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return api.Order{}, echo.NewHTTPError(http.StatusBadRequest, "path parameter id must be a positive integer")
	}
	ctx, sh := c.Request().Context(), r.Shard
	var o db.Order
	err = sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		o, err = db.New(conn).GetOrder(ctx, db.GetOrderParams{TenantID: r.Tenant, ID: id})
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
