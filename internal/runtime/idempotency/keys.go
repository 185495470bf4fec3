// Package idempotency gives the routes a spec marks idempotent their
// Idempotency-Key semantics (docs/idempotency.md): a request carrying the
// header records the key in progress, under a lease, in its own short
// transaction on the tenant's shard before the handler runs; the handler's
// answer is stored in the same transaction as the handler's writes when it
// wrote through its accessor's Tx (the accessor defers that commit until
// the answer is known, shards.DeferredCommit), or right after it returned
// otherwise; a retry with the same key replays the stored answer with
// Idempotent-Replayed: true, a concurrent one is refused 409 without
// waiting, and the same key with another request 422.
//
// The keys live in the runtime's own table on every shard
// (cellgate_idempotency_keys, its own migrations, Files), with the
// tenant's id and slot so a slot move carries them. Sweep deletes expired
// keys; RunSweeper does so on a timer.
//
// Concurrency: a Keys is immutable once built and safe for concurrent use;
// every request's state lives in its own call.
package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/shards"
)

// Header is the request header carrying the client's key (the IETF
// httpapi draft "The Idempotency-Key HTTP Header Field").
const Header = "Idempotency-Key"

// ReplayedHeader marks an answer replayed from the stored one.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyBytes bounds a key's length.
const MaxKeyBytes = 255

// The refusals, as problem details with a stable code.
var (
	// ErrKeyInvalid answers a key that is empty, too long or not visible
	// ASCII.
	ErrKeyInvalid = httpguard.NewProblem(http.StatusBadRequest, "idempotency_key_invalid",
		"the Idempotency-Key header must be 1 to 255 visible ASCII characters")
	// ErrInProgress answers a request whose key another request holds.
	ErrInProgress = httpguard.NewRetryProblem(http.StatusConflict, 1, "idempotency_key_in_progress",
		"a request with this Idempotency-Key is in progress; retry after it has finished")
	// ErrKeyReused answers a key already used with another request (method,
	// target or body).
	ErrKeyReused = httpguard.NewProblem(http.StatusUnprocessableEntity, "idempotency_key_reused",
		"this Idempotency-Key was used with a different request; use a new key for a new request")
	// ErrLeaseLost answers a request that ran longer than its key's lease
	// while a retry took the key over: its writes were rolled back.
	ErrLeaseLost = httpguard.NewProblem(http.StatusConflict, "idempotency_lease_lost",
		"the request outlived its Idempotency-Key lease and a retry took the key over; its changes were rolled back")
)

// Handler is a tenant route's handler: internal/runtime's TenantHandler.
type Handler = func(c echo.Context, sh shards.Accessor) error

// Options build a Keys.
type Options struct {
	// Config is the spec's server.idempotency.
	Config config.Idempotency
	// Now is the clock (default time.Now): leases and expiries are compared
	// with it, so tests move time instead of sleeping.
	Now func() time.Time
	// Log reports bookkeeping that failed after the answer was chosen.
	// Default: slog.Default().
	Log *slog.Logger
}

// Keys wraps idempotent routes' handlers.
type Keys struct {
	ttl, lease time.Duration
	now        func() time.Time
	log        *slog.Logger
	// afterCommit, set by tests (or by a testhooks build,
	// testHookAfterCommit), runs once the answer is committed and before
	// it is written (a cell that dies there).
	afterCommit func()
}

// New builds a Keys; a zero TTL or lease is an error naming the field.
func New(o Options) (*Keys, error) {
	k := &Keys{ttl: o.Config.TTL.D(), lease: o.Config.Lease.D(), now: o.Now, log: o.Log, afterCommit: testHookAfterCommit}
	switch {
	case k.ttl <= 0:
		return nil, errors.New("server.idempotency.ttl: must be above zero")
	case k.lease <= 0:
		return nil, errors.New("server.idempotency.lease: must be above zero")
	}
	if k.now == nil {
		k.now = time.Now
	}
	k.log = cmp.Or(k.log, slog.Default())
	return k, nil
}

// bookkeeping bounds the statements that run after the handler returned:
// they must run even when the client has gone (the request's context is
// cancelled then), or a mark would stay until its lease ends.
const bookkeeping = 5 * time.Second

// Wrap returns h with the Idempotency-Key semantics for the route method
// path (the key's scope, with the tenant). A request without the header
// runs h as is.
func (k *Keys) Wrap(method, path string, h Handler) Handler {
	route := method + " " + path
	return func(c echo.Context, sh shards.Accessor) error {
		req := c.Request()
		raw, ok := req.Header[Header]
		if !ok {
			return h(c, sh)
		}
		if len(raw) != 1 || !validKey(raw[0]) {
			return ErrKeyInvalid
		}
		if sh.Err() != nil {
			return h(c, sh) // the handler answers an unreachable shard as it would without a key
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		id := ident{tenant: sh.Tenant(), slot: sh.Slot(), route: route, key: raw[0]}
		hash := requestHash(req, body)
		token := newToken()

		var (
			out outcome
			rec record
		)
		// The claim is a checkout like any other: it takes one of the
		// tenant's database permits.
		err = sh.Conn(req.Context(), func(conn *pgxpool.Conn) error {
			var err error
			out, rec, err = k.claim(req.Context(), conn, id, hash, token)
			return err
		})
		if err != nil {
			return err
		}
		switch out {
		case replay:
			return writeReplay(c, rec)
		case busy:
			return ErrInProgress
		case mismatch:
			return ErrKeyReused
		}
		return k.run(c, sh, h, id, token)
	}
}

// run serves a request that holds its key: the handler answers into a
// buffer, the answer is stored (with the handler's transaction when there
// is one), and only then is it sent.
func (k *Keys) run(c echo.Context, sh shards.Accessor, h Handler, id ident, token []byte) (err error) {
	ctx := c.Request().Context()
	var d shards.DeferredCommit
	res := c.Response()
	w := &recorder{header: res.Header()}
	orig := res.Writer
	res.Writer = w
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeeping)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			// The handler panicked: its transaction rolls back and the key
			// is free again, as if it had never run.
			res.Writer = orig
			d.Rollback(bctx)
			k.release(bctx, sh.Shard(), id, token)
			panic(p)
		}
	}()
	herr := h(c, sh.DeferCommit(&d))
	if herr != nil {
		// The error's answer is the runtime's: render it into the buffer.
		c.Error(herr)
	}
	res.Writer = orig
	a := w.answer()

	switch {
	case d.Pending():
		err = d.Commit(bctx, func(tx shards.Tx) error { return store(bctx, tx, id, token, a) })
		if err != nil {
			// Nothing the handler wrote is committed: free the key (a lost
			// lease is already someone else's).
			if !errors.Is(err, errLeaseLost) {
				k.release(bctx, sh.Shard(), id, token)
			}
			return k.failed(c, err)
		}
		if k.afterCommit != nil {
			k.afterCommit()
		}
	case d.RolledBack() || a.status >= 500:
		// The handler's transaction rolled back, or it failed without one:
		// a retry runs it again.
		k.release(bctx, sh.Shard(), id, token)
	default:
		// No transaction: the answer is stored after the fact (weaker; see
		// the package doc and docs/idempotency.md).
		if err := store(bctx, sh.Shard().Pool, id, token, a); err != nil {
			k.log.Warn("idempotency: storing the answer failed; a retry will run the handler again",
				"route", id.route, "tenant", id.tenant, "error", err.Error())
		}
	}
	return w.flush(orig)
}

// failed answers a request whose answer could not be committed; the
// buffered answer is discarded.
func (k *Keys) failed(c echo.Context, err error) error {
	res := c.Response()
	res.Committed, res.Status, res.Size = false, http.StatusOK, 0
	for name := range res.Header() {
		delete(res.Header(), name)
	}
	if errors.Is(err, errLeaseLost) {
		return ErrLeaseLost
	}
	return err
}

// release frees the key; a failure only delays a retry until the lease
// ends, so it is logged, not answered.
func (k *Keys) release(ctx context.Context, sh *shards.Shard, id ident, token []byte) {
	if err := release(ctx, sh, id, token); err != nil {
		k.log.Warn("idempotency: freeing the key failed; a retry waits for its lease",
			"route", id.route, "tenant", id.tenant, "error", err.Error())
	}
}

// writeReplay answers with the stored answer.
func writeReplay(c echo.Context, rec record) error {
	h := c.Response().Header()
	if rec.contentType != nil && *rec.contentType != "" {
		h.Set(echo.HeaderContentType, *rec.contentType)
	}
	h.Set(ReplayedHeader, "true")
	h.Set(echo.HeaderContentLength, strconv.Itoa(len(rec.body)))
	c.Response().WriteHeader(int(*rec.status))
	_, err := c.Response().Write(rec.body)
	return err
}

// validKey accepts 1 to MaxKeyBytes visible ASCII characters (a quoted
// structured-field string, as the IETF draft writes keys, is kept whole:
// the key is opaque).
func validKey(k string) bool {
	if k == "" || len(k) > MaxKeyBytes {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestHash is SHA-256 over the method, the request target (path and
// query) and the body, each length-prefixed so no two requests collide by
// moving bytes between parts.
func requestHash(r *http.Request, body []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(r.Method), []byte(r.URL.RequestURI()), body} {
		var n [8]byte
		l := uint64(len(part))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}
