package tests

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

// benchRouter registers api.Register's routes on a bare Echo: the cost
// measured is binding, validation and the answer, not the tenant chain.
type benchRouter struct{ e *echo.Echo }

func (r benchRouter) Public(method, path string, h echo.HandlerFunc, _ ...echo.MiddlewareFunc) {
	r.e.Add(method, path, h)
}

func (r benchRouter) Tenant(method, path string, h func(echo.Context, shards.Accessor) error, _ ...echo.MiddlewareFunc) {
	r.e.Add(method, path, func(c echo.Context) error { return h(c, shards.Accessor{}) })
}

// Idempotent registers like Tenant: the keys' cost is measured by
// internal/runtime/idempotency's benchmark, not here.
func (r benchRouter) Idempotent(method, path string, h func(echo.Context, shards.Accessor) error, _ ...echo.MiddlewareFunc) {
	r.Tenant(method, path, h)
}

// benchHandler answers SignUp without database work.
type benchHandler struct{ api.Handler }

var benchCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (benchHandler) SignUp(c echo.Context, r api.Request, body api.SignUp) (api.Account, error) {
	name := ""
	if body.Name != nil {
		name = *body.Name
	}
	return api.Account{ID: 1, Email: body.Email, Name: name, CreatedAt: benchCreated}, nil
}

// handSignUp is POST /signup bound and validated by hand, as the example
// app did before its route had a schema: the baseline.
func handSignUp(c echo.Context) error {
	var req struct {
		Email string `json:"email"`
		Name  string `json:"name"`
	}
	if err := c.Bind(&req); err != nil {
		return err
	}
	switch {
	case req.Email == "":
		return runtime.BadBody(nil, "email is required")
	case len(req.Email) > 254:
		return runtime.BadBody(nil, "email must be at most 254 bytes")
	case len(req.Name) > 200:
		return runtime.BadBody(nil, "name must be at most 200 bytes")
	}
	return c.JSON(http.StatusCreated, api.Account{ID: 1, Email: req.Email, Name: req.Name, CreatedAt: benchCreated})
}

// emailPattern is #SignUp's pattern for email, for handSignUpFull.
var emailPattern = regexp.MustCompile(`^[^@\s]+@[^@\s]+$`)

// handSignUpFull is handSignUp with every constraint of #SignUp checked
// by hand as the generated code does (runes, not bytes; the pattern; a
// missing email told from an empty one): the same route's contract, bound
// by hand.
func handSignUpFull(c echo.Context) error {
	var req struct {
		Email *string `json:"email"`
		Name  *string `json:"name"`
	}
	if err := c.Bind(&req); err != nil {
		return err
	}
	switch {
	case req.Email == nil:
		return runtime.BadBody(nil, "email is required")
	case utf8.RuneCountInString(*req.Email) < 3:
		return runtime.BadBody(nil, "email must be at least 3 characters")
	case utf8.RuneCountInString(*req.Email) > 254:
		return runtime.BadBody(nil, "email must be at most 254 characters")
	case !emailPattern.MatchString(*req.Email):
		return runtime.BadBody(nil, "email must be an address")
	case req.Name != nil && utf8.RuneCountInString(*req.Name) > 200:
		return runtime.BadBody(nil, "name must be at most 200 characters")
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
	}
	return c.JSON(http.StatusCreated, api.Account{ID: 1, Email: *req.Email, Name: name, CreatedAt: benchCreated})
}

// BenchmarkSignUpBinding: the generated typed route (decode into the
// wire type, every constraint of #SignUp, typed call, JSON answer) against
// the same route bound by hand, in one run: "hand" with the checks the
// example app had before its schema (no pattern, bytes for runes) and
// "hand-full" with every constraint of #SignUp. The typed route should
// cost at most 1/0.95 of the hand-bound one; instruction counts
// (callgrind) say so on a loaded machine, ns/op only on a quiet one
// (docs/api.md, "Cost").
func BenchmarkSignUpBinding(b *testing.B) {
	e := echo.New()
	e.Binder = &runtime.Binder{}
	if err := api.Register(benchRouter{e}, benchHandler{}, api.Middleware{}); err != nil {
		b.Fatal(err)
	}
	e.POST("/hand/signup", handSignUp)
	e.POST("/hand-full/signup", handSignUpFull)
	const body = `{"email":"someone@acme.test","name":"Someone"}`
	for _, bc := range []struct{ name, path string }{{"hand", "/hand/signup"}, {"hand-full", "/hand-full/signup"}, {"typed", "/signup"}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, bc.path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusCreated {
					b.Fatalf("%s: %d %s", bc.path, rec.Code, rec.Body)
				}
			}
		})
	}
}
