package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/httpguard"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/testpg"
)

// fixture is one shard with the keys table and an app table, an Echo
// server whose POST /things handler writes a row through the accessor's
// transaction, and a clock the test moves.
type fixture struct {
	set   *shards.Set
	keys  *Keys
	srv   *httptest.Server
	calls atomic.Int64
	clock atomic.Int64 // unix nanoseconds
	// failNext makes the handler's transaction fail once (a rollback).
	failNext atomic.Bool
	// hold blocks the first handler whose note is "hold" inside its
	// transaction until the test closes it.
	hold    chan struct{}
	held    atomic.Bool
	entered chan struct{}
}

const testTenant = "acme"

func newFixture(t testing.TB, handler func(f *fixture) Handler) *fixture {
	t.Helper()
	dsn := testpg.CreateDB(t, "idem")
	ctx := context.Background()
	if err := Files.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	db := config.Database{
		Control: config.ControlDB{Name: "control", DSNEnv: "DSN", MaxConns: 2},
		Shards:  []config.Shard{{Name: "shard-0", DSNEnv: "DSN", MaxConns: 60}},
	}
	set, err := shards.Open(ctx, db, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	if _, err := set.Shards()[0].Pool.Exec(ctx, `CREATE TABLE things (tenant_id text NOT NULL, slot int NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, note text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	f := &fixture{set: set, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	f.keys, err = New(Options{
		Config: config.Idempotency{TTL: config.Duration(24 * time.Hour), Lease: config.Duration(time.Minute)},
		Now:    func() time.Time { return time.Unix(0, f.clock.Load()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		// The runtime's error handler in miniature: problems as problem
		// details, anything else 500.
		var p *httpguard.Problem
		if errors.As(err, &p) {
			p.Write(c.Response(), false)
			return
		}
		_ = c.JSON(http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
	h := f.keys.Wrap(http.MethodPost, "/things", handler(f))
	e.POST("/things", func(c echo.Context) error {
		return h(c, set.Accessor(c.Request().Header.Get("X-Tenant-ID"), nil))
	})
	f.srv = httptest.NewServer(e)
	t.Cleanup(f.srv.Close)
	return f
}

// txHandler writes one row per run through the accessor's transaction and
// answers 201 with its id.
func txHandler(f *fixture) Handler {
	return func(c echo.Context, sh shards.Accessor) error {
		f.calls.Add(1)
		var in struct{ Note string }
		if err := json.NewDecoder(c.Request().Body).Decode(&in); err != nil {
			return err
		}
		var id int64
		err := sh.Tx(c.Request().Context(), func(tx shards.Tx) error {
			if err := tx.QueryRow(c.Request().Context(), `INSERT INTO things (tenant_id, slot, note) VALUES ($1, $2, $3) RETURNING id`,
				sh.Tenant(), sh.Slot(), in.Note).Scan(&id); err != nil {
				return err
			}
			if in.Note == "hold" && f.held.CompareAndSwap(false, true) {
				f.entered <- struct{}{}
				<-f.hold
			}
			if f.failNext.CompareAndSwap(true, false) {
				return errors.New("the handler's transaction failed")
			}
			return nil
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]any{"id": id, "note": in.Note})
	}
}

type reply struct {
	status   int
	body     string
	replayed bool
	ctype    string
}

func (f *fixture) post(t *testing.T, key, body string) (reply, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/things", bytes.NewBufferString(body))
	req.Header.Set("X-Tenant-ID", testTenant)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(Header, key)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, body: string(b), replayed: res.Header.Get(ReplayedHeader) == "true", ctype: res.Header.Get("Content-Type")}, nil
}

func (f *fixture) mustPost(t *testing.T, key, body string) reply {
	t.Helper()
	r, err := f.post(t, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.set.Shards()[0].Pool.QueryRow(context.Background(), `SELECT count(*) FROM things`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) keyRows(t *testing.T) (total, done int) {
	t.Helper()
	if err := f.set.Shards()[0].Pool.QueryRow(context.Background(),
		`SELECT count(*), count(*) FILTER (WHERE state = 'done') FROM cellgate_idempotency_keys`).Scan(&total, &done); err != nil {
		t.Fatal(err)
	}
	return total, done
}

func (f *fixture) advance(d time.Duration) { f.clock.Add(int64(d)) }

// TestConcurrentSameKey sends 50 POSTs with one key at once while the
// first holds its transaction open: exactly one row is written, every
// other answer is a replay of the same body or a 409, and once the first
// has finished a retry replays it.
func TestConcurrentSameKey(t *testing.T) {
	f := newFixture(t, txHandler)
	const n = 50
	var wg sync.WaitGroup
	replies := make([]reply, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = f.post(t, "key-50", `{"note":"hold"}`) })
	}
	// Let the others meet the in-progress key, then let the first go.
	<-f.entered
	time.Sleep(300 * time.Millisecond)
	close(f.hold)
	wg.Wait()

	var created, replayed, conflicts int
	var first string
	for i, r := range replies {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch r.status {
		case http.StatusCreated:
			created++
			if r.replayed {
				replayed++
			}
			if first == "" {
				first = r.body
			} else if r.body != first {
				t.Fatalf("bodies differ: %q and %q", first, r.body)
			}
		case http.StatusConflict:
			conflicts++
			if r.ctype != httpguard.ContentType {
				t.Fatalf("409 content type %q", r.ctype)
			}
		default:
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	if created-replayed != 1 || created+conflicts != n {
		t.Fatalf("created %d (replayed %d), conflicts %d", created, replayed, conflicts)
	}
	if got := f.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times", got)
	}
	if got := f.rows(t); got != 1 {
		t.Fatalf("%d rows", got)
	}
	r := f.mustPost(t, "key-50", `{"note":"hold"}`)
	if r.status != http.StatusCreated || !r.replayed || r.body != first || r.ctype != echo.MIMEApplicationJSON {
		t.Fatalf("retry after the first finished: %+v", r)
	}
	t.Logf("created 1, replayed %d, 409 %d", replayed, conflicts)
}

// TestRetryAfterAbortBetweenCommitAndAnswer: a hook (not a real process
// kill) aborts the connection once the handler's transaction, with the
// stored answer, has committed and before any byte of the answer is sent,
// as a cell dying at that point would. The client sees no answer; its
// retry gets the committed answer and the handler does not run again.
func TestRetryAfterAbortBetweenCommitAndAnswer(t *testing.T) {
	f := newFixture(t, txHandler)
	var aborted atomic.Bool
	f.keys.afterCommit = func() {
		if aborted.CompareAndSwap(false, true) {
			panic(http.ErrAbortHandler)
		}
	}
	if _, err := f.post(t, "key-abort", `{"note":"x"}`); err == nil {
		t.Fatal("the aborted request got an answer")
	}
	if f.rows(t) != 1 {
		t.Fatal("the write did not commit")
	}
	r := f.mustPost(t, "key-abort", `{"note":"x"}`)
	if r.status != http.StatusCreated || !r.replayed || r.body != `{"id":1,"note":"x"}`+"\n" {
		t.Fatalf("retry: %+v", r)
	}
	if f.calls.Load() != 1 || f.rows(t) != 1 {
		t.Fatalf("handler ran %d times, %d rows", f.calls.Load(), f.rows(t))
	}
}

// TestRetryAfterRollbackRunsAgain: the handler's transaction rolls back,
// the key is freed, and the retry runs the handler again.
func TestRetryAfterRollbackRunsAgain(t *testing.T) {
	f := newFixture(t, txHandler)
	f.failNext.Store(true)
	if r := f.mustPost(t, "key-rb", `{"note":"x"}`); r.status != http.StatusInternalServerError || r.replayed {
		t.Fatalf("failed request: %+v", r)
	}
	if total, _ := f.keyRows(t); total != 0 || f.rows(t) != 0 {
		t.Fatalf("after the rollback: %d keys, %d rows", total, f.rows(t))
	}
	r := f.mustPost(t, "key-rb", `{"note":"x"}`)
	if r.status != http.StatusCreated || r.replayed {
		t.Fatalf("retry: %+v", r)
	}
	if f.calls.Load() != 2 || f.rows(t) != 1 {
		t.Fatalf("handler ran %d times, %d rows", f.calls.Load(), f.rows(t))
	}
}

// TestSameKeyOtherBody: the key's second use with another body is 422 and
// runs nothing; the same key on another tenant is another key.
func TestSameKeyOtherBody(t *testing.T) {
	f := newFixture(t, txHandler)
	if r := f.mustPost(t, "key-b", `{"note":"a"}`); r.status != http.StatusCreated {
		t.Fatalf("first: %+v", r)
	}
	r := f.mustPost(t, "key-b", `{"note":"b"}`)
	if r.status != http.StatusUnprocessableEntity || r.ctype != httpguard.ContentType {
		t.Fatalf("other body: %+v", r)
	}
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Code != "idempotency_key_reused" {
		t.Fatalf("problem: %s", r.body)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", f.calls.Load())
	}
	if r := f.mustPost(t, "bad key", `{"note":"a"}`); r.status != http.StatusBadRequest {
		t.Fatalf("invalid key: %+v", r)
	}
	if r := f.mustPost(t, "", `{"note":"a"}`); r.status != http.StatusCreated || f.calls.Load() != 2 {
		t.Fatalf("no key runs the handler: %+v", r)
	}
}

// TestLeaseExpiryTakeover: a key left in progress by a request whose
// process died (its claim made directly, never finished) refuses retries
// with 409 while its lease runs and lets one take over after; a first
// holder that finishes after losing its lease has its writes rolled back.
func TestLeaseExpiryTakeover(t *testing.T) {
	f := newFixture(t, txHandler)
	ctx := context.Background()
	sh := f.set.Accessor(testTenant, nil)
	body := `{"note":"t"}`
	req := httptest.NewRequest(http.MethodPost, "/things", nil)
	id := ident{tenant: testTenant, slot: sh.Slot(), route: "POST /things", key: "key-lease"}
	err := sh.Conn(ctx, func(c *pgxpool.Conn) error {
		out, _, err := f.keys.claim(ctx, c, id, requestHash(req, []byte(body)), newToken())
		if err == nil && out != claimed {
			err = fmt.Errorf("outcome %d", out)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.mustPost(t, "key-lease", body); r.status != http.StatusConflict {
		t.Fatalf("within the lease: %+v", r)
	}
	f.advance(time.Minute)
	if r := f.mustPost(t, "key-lease", body); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("after the lease: %+v", r)
	}
	if f.calls.Load() != 1 || f.rows(t) != 1 {
		t.Fatalf("handler ran %d times, %d rows", f.calls.Load(), f.rows(t))
	}

	// A holder outliving its lease: it blocks in its transaction, a retry
	// takes the key over and finishes; the first one's answer is refused
	// and its row rolled back.
	slow := `{"note":"hold"}`
	first := make(chan reply, 1)
	go func() { r, _ := f.post(t, "key-slow", slow); first <- r }()
	<-f.entered
	f.advance(time.Minute)
	second := f.mustPost(t, "key-slow", slow)
	if second.status != http.StatusCreated || second.replayed {
		t.Fatalf("takeover: %+v", second)
	}
	// Unblock the first, whose transaction still waits in the handler.
	close(f.hold)
	r := <-first
	if r.status != http.StatusConflict || !bytes.Contains([]byte(r.body), []byte("idempotency_lease_lost")) {
		t.Fatalf("first holder after losing its lease: %+v", r)
	}
	if f.rows(t) != 2 {
		t.Fatalf("%d rows; want the two committed requests only", f.rows(t))
	}
}

// TestHandlerWithoutTx: a handler that writes nothing through the
// accessor's transaction gets its answer stored after it returns; a 5xx
// of such a handler is not stored.
func TestHandlerWithoutTx(t *testing.T) {
	f := newFixture(t, func(f *fixture) Handler {
		return func(c echo.Context, sh shards.Accessor) error {
			n := f.calls.Add(1)
			if n == 1 {
				return errors.New("boom")
			}
			return c.String(http.StatusAccepted, fmt.Sprintf("run %d", n))
		}
	})
	if r := f.mustPost(t, "k", "x"); r.status != http.StatusInternalServerError {
		t.Fatalf("first: %+v", r)
	}
	if r := f.mustPost(t, "k", "x"); r.status != http.StatusAccepted || r.body != "run 2" || r.replayed {
		t.Fatalf("second: %+v", r)
	}
	r := f.mustPost(t, "k", "x")
	if r.status != http.StatusAccepted || r.body != "run 2" || !r.replayed || r.ctype != echo.MIMETextPlainCharsetUTF8 {
		t.Fatalf("replay: %+v", r)
	}
}

// TestSweep deletes the keys past their expiry and keeps the others,
// an expired key whose lease still runs included.
func TestSweep(t *testing.T) {
	f := newFixture(t, txHandler)
	ctx := context.Background()
	f.mustPost(t, "old", `{"note":"a"}`)
	f.advance(12 * time.Hour)
	f.mustPost(t, "young", `{"note":"b"}`)
	f.advance(12 * time.Hour)
	// "old" is 24 h old now; a request in progress with a fresh lease
	// would not be swept even past its expiry (moved there by hand).
	if _, err := f.set.Shards()[0].Pool.Exec(ctx,
		`INSERT INTO cellgate_idempotency_keys (tenant_id, slot, route, idem_key, request_hash, state, lease_token, lease_until, expires_at)
		 VALUES ('acme', 0, 'POST /things', 'running', '\x00', 'in_progress', '\x01', $1, $2)`,
		f.keys.now().Add(time.Minute), f.keys.now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := Sweep(ctx, f.set.Shards()[0], f.keys.now(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("swept %d", n)
	}
	if total, done := f.keyRows(t); total != 2 || done != 1 {
		t.Fatalf("after the sweep: %d keys, %d done", total, done)
	}
	// The swept key is new again: the handler runs.
	if r := f.mustPost(t, "old", `{"note":"a"}`); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("after the sweep: %+v", r)
	}
}
