package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newcomerRoutes, newcomerKind, newcomerMigrationUp, newcomerQueries,
// newcomerHandlers and newcomerWorker are what a newcomer writes to follow
// the README's sections "Handlers", "Tables" and "Jobs"
// (TestReadmeSnippetsAreReplayed holds the README's snippets to them).
const (
	newcomerRoutes = `
		{method: "POST", path: "/invoices", handler: "CreateInvoice"},
		{method: "GET", path: "/invoices/{id}", handler: "GetInvoice"},`

	newcomerKind = `, {
			name: "send_invoice"
			args: [{name: "invoice_id", type: "int64"}]
			max_attempts: 3
			timeout:      "10s"
		}]`

	newcomerMigrationUp = `CREATE TABLE invoices (
    tenant_id  text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    slot       integer     NOT NULL CHECK (slot BETWEEN 0 AND 16383),
    account_id bigint      NOT NULL,
    cents      bigint      NOT NULL CHECK (cents >= 0),
    sent_at    timestamptz,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, account_id) REFERENCES accounts (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX invoices_slot_idx ON invoices (slot);
CREATE UNIQUE INDEX invoices_replica_identity ON invoices (tenant_id, id, slot);
ALTER TABLE invoices REPLICA IDENTITY USING INDEX invoices_replica_identity;
`

	newcomerQueries = `-- name: CreateInvoice :one
INSERT INTO invoices (tenant_id, slot, account_id, cents)
VALUES (@tenant_id, @slot, @account_id, @cents) RETURNING *;

-- name: GetInvoice :one
SELECT * FROM invoices WHERE tenant_id = @tenant_id AND id = @id;

-- name: MarkInvoiceSent :execrows
UPDATE invoices SET sent_at = now() WHERE tenant_id = @tenant_id AND id = @id;
`

	newcomerHandlers = `package app

import (
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/gen/api"
	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/internal/runtime"
	"github.com/cellgate/cellgate/internal/shards"
)

type createInvoiceRequest struct {
	AccountID int64 ` + "`json:\"account_id\"`" + `
	Cents     int64 ` + "`json:\"cents\"`" + `
}

// CreateInvoice writes the invoice and enqueues send_invoice in one transaction.
func (a *App) CreateInvoice(c echo.Context, r api.Request) error {
	var req createInvoiceRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if req.AccountID <= 0 || req.Cents < 0 {
		return runtime.BadBody(nil, "account_id must be > 0 and cents >= 0")
	}
	ctx, acc := c.Request().Context(), r.Shard
	var inv db.Invoice
	err := acc.Tx(ctx, func(tx shards.Tx) error {
		var err error
		inv, err = db.New(tx).CreateInvoice(ctx, db.CreateInvoiceParams{
			TenantID: r.Tenant, Slot: int32(acc.Slot()), AccountID: req.AccountID, Cents: req.Cents,
		})
		if err != nil {
			return err
		}
		_, err = a.d.Jobs.EnqueueTx(ctx, tx, jobkinds.SendInvoiceArgs{InvoiceID: inv.ID})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, inv)
}

// GetInvoice reads one invoice by the {id} path parameter.
func (a *App) GetInvoice(c echo.Context, r api.Request) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return echo.NewHTTPError(http.StatusBadRequest, "path parameter id must be a positive integer")
	}
	ctx := c.Request().Context()
	var inv db.Invoice
	err = r.Shard.Conn(ctx, func(conn *pgxpool.Conn) error {
		inv, err = db.New(conn).GetInvoice(ctx, db.GetInvoiceParams{TenantID: r.Tenant, ID: id})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, inv)
}
`

	newcomerWorker = `package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// SendInvoice marks the invoice sent on the tenant's shard.
func (w *Workers) SendInvoice(ctx context.Context, job *jobs.Job[jobkinds.SendInvoiceArgs], sh shards.Accessor) error {
	if err := sh.Err(); err != nil {
		return jobs.Permanent(err)
	}
	var n int64
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		n, err = db.New(conn).MarkInvoiceSent(ctx, db.MarkInvoiceSentParams{TenantID: sh.Tenant(), ID: job.Args.InvoiceID})
		return err
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return jobs.Permanent(fmt.Errorf("invoice %d of tenant %q not found", job.Args.InvoiceID, sh.Tenant()))
	}
	return nil
}
`
)

// goIn runs the go tool with args in dir and returns its combined output.
// The test passes -trimpath so the build cache's entries do not depend on
// the scratch directory: packages the newcomer did not touch come from the
// cache of earlier runs instead of being recompiled.
func goIn(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// editFile replaces old (which must occur exactly once) with new in dir/name.
func editFile(t testing.TB, dir, name, old, new string) {
	t.Helper()
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want 1 (the example spec changed?)", name, old, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeFiles writes name → content under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewcomerExtendsTheTemplate follows the README's recipes the way a
// newcomer would, in a scratch copy of the repository: a route with a path
// parameter, a tenant table and its migration, its queries, a job kind
// enqueued in the handler's transaction and its worker. The build must
// fail, naming the missing worker method, until the worker exists; the
// cell must serve the route on fresh databases and run the job; a migration
// PostgreSQL rejects must keep /readyz 503 naming the file.
func TestNewcomerExtendsTheTemplate(t *testing.T) {
	start := time.Now()
	dir := scratchCopy(t)

	editFile(t, dir, "schema/app.cue", `handler: "GetOrder", params: "OrderRef", responses: "200": "Order"},`, `handler: "GetOrder", params: "OrderRef", responses: "200": "Order"},`+newcomerRoutes)
	editFile(t, dir, "schema/app.cue", `unique_by: ["account_id"]
		}]`, `unique_by: ["account_id"]
		}`+newcomerKind)
	editFile(t, dir, "schema/app.cue", `tenant_tables: ["accounts", "orders"]`, `tenant_tables: ["accounts", "orders", "invoices"]`)
	writeFiles(t, dir, map[string]string{
		"sql/migrations/000003_invoices.up.sql":   newcomerMigrationUp,
		"sql/migrations/000003_invoices.down.sql": "DROP TABLE invoices;\n",
		"sql/queries/invoices.sql":                newcomerQueries,
	})
	if out, err := goIn(t, dir, "run", "-trimpath", "./cmd/generate"); err != nil {
		t.Fatalf("generate: %v\n%s", err, out)
	}
	t.Logf("generated after %s", time.Since(start).Round(time.Millisecond))

	// The handlers alone: the build names the worker that is missing.
	writeFiles(t, dir, map[string]string{"app/invoices.go": newcomerHandlers})
	bin := filepath.Join(dir, "server")
	out, err := goIn(t, dir, "build", "-trimpath", "-o", bin, "./cmd/server")
	if err == nil {
		t.Fatalf("the build passed with send_invoice in the spec and no worker for it:\n%s", out)
	}
	if !strings.Contains(out, "missing method SendInvoice") {
		t.Fatalf("the failed build does not name the missing worker method SendInvoice:\n%s", out)
	}
	writeFiles(t, dir, map[string]string{"app/invoice_workers.go": newcomerWorker})
	if out, err := goIn(t, dir, "build", "-trimpath", "-o", bin, "./cmd/server"); err != nil {
		t.Fatalf("build with the worker: %v\n%s", err, out)
	}
	t.Logf("built after %s", time.Since(start).Round(time.Millisecond))

	env := cellEnv(t)
	c := startProcessCell(t, bin, env)
	c.waitStatus(t, "/readyz", http.StatusOK, 30*time.Second)

	const tenant = "newcomer-co"
	code, body := c.do(t, "POST", "/signup", tenant, `{"email":"ada@example.com","name":"Ada"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /signup = %d %s", code, body)
	}
	var acct struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(body, &acct); err != nil {
		t.Fatal(err)
	}
	code, body = c.do(t, "POST", "/invoices", tenant, fmt.Sprintf(`{"account_id":%d,"cents":4200}`, acct.ID))
	if code != http.StatusCreated {
		t.Fatalf("POST /invoices = %d %s", code, body)
	}
	var inv struct {
		ID    int64 `json:"id"`
		Cents int64 `json:"cents"`
	}
	if err := json.Unmarshal(body, &inv); err != nil || inv.ID <= 0 || inv.Cents != 4200 {
		t.Fatalf("POST /invoices answered %s (%v)", body, err)
	}
	if code, body := c.do(t, "GET", fmt.Sprintf("/invoices/%d", inv.ID), "other-co", ""); code != http.StatusNotFound {
		t.Errorf("another tenant's GET /invoices/%d = %d %s, want 404", inv.ID, code, body)
	}
	if code, body := c.do(t, "GET", "/invoices/abc", tenant, ""); code != http.StatusBadRequest {
		t.Errorf("GET /invoices/abc = %d %s, want 400", code, body)
	}
	// The worker sets sent_at; the route shows it once the job completed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := c.do(t, "GET", fmt.Sprintf("/invoices/%d", inv.ID), tenant, "")
		if code != http.StatusOK {
			t.Fatalf("GET /invoices/%d = %d %s", inv.ID, code, body)
		}
		var got struct {
			ID     int64 `json:"id"`
			SentAt any   `json:"sent_at"`
		}
		if err := json.Unmarshal(body, &got); err != nil || got.ID != inv.ID {
			t.Fatalf("GET /invoices/%d answered %s (%v)", inv.ID, body, err)
		}
		if got.SentAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("send_invoice never marked invoice %d sent: %s", inv.ID, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitJobs(t, env, "send_invoice", tenant, 1)
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	t.Logf("route and job done after %s", time.Since(start).Round(time.Millisecond))

	// A migration PostgreSQL rejects: the cell on the same databases stays
	// unready, naming the file.
	writeFiles(t, dir, map[string]string{
		"sql/migrations/000004_broken.up.sql":   "ALTER TABLE invoicez ADD COLUMN due date;\n",
		"sql/migrations/000004_broken.down.sql": "ALTER TABLE invoices DROP COLUMN due;\n",
	})
	if out, err := goIn(t, dir, "build", "-trimpath", "-o", bin, "./cmd/server"); err != nil {
		t.Fatalf("build with the broken migration: %v\n%s", err, out)
	}
	c2 := startProcessCell(t, bin, env)
	c2.waitStatus(t, "/healthz", http.StatusOK, 10*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, failed := readyz(t, c2)
		if code == http.StatusServiceUnavailable && strings.Contains(failed["migrations"], "000004_broken.up.sql") {
			break
		}
		if code == http.StatusOK {
			t.Fatal("/readyz = 200 with a migration PostgreSQL rejects")
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never named 000004_broken.up.sql: %d %v", code, failed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if code, failed := readyz(t, c2); code != http.StatusServiceUnavailable || !strings.Contains(failed["migrations"], "000004_broken.up.sql") {
		t.Fatalf("/readyz = %d %v a second later, want 503 naming 000004_broken.up.sql", code, failed)
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// TestReadmeSnippetsAreReplayed holds README.md's Go and SQL snippets to
// the files TestNewcomerExtendsTheTemplate builds and runs: each fenced
// go or sql block must occur, whitespace aside, in one of them, so a
// snippet that stops compiling (or a recipe that drifts from the test)
// fails here.
func TestReadmeSnippetsAreReplayed(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	replayed := map[string]string{
		"go":  squash(newcomerHandlers + "\n" + newcomerWorker),
		"sql": squash(newcomerMigrationUp + "\n" + newcomerQueries),
	}
	blocks := fencedBlocks(string(raw))
	n := 0
	for _, b := range blocks {
		body, ok := replayed[b.lang]
		if !ok {
			continue
		}
		n++
		if !strings.Contains(body, squash(b.text)) {
			t.Errorf("README.md line %d: this %s snippet is not among the newcomer test's files (newcomer_test.go):\n%s", b.line, b.lang, b.text)
		}
	}
	if n < 4 {
		t.Fatalf("README.md has %d go and sql snippets, want the handler, worker, enqueue, migration and queries (at least 4)", n)
	}
}

// fencedBlock is one ``` block of a Markdown file.
type fencedBlock struct {
	lang, text string
	line       int // of the opening fence, from 1
}

// fencedBlocks returns md's fenced code blocks. A fence may be indented (a
// block inside a list item); the indentation is kept in text, which squash
// drops anyway.
func fencedBlocks(md string) []fencedBlock {
	var out []fencedBlock
	var cur *fencedBlock
	var lines []string
	for i, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				lines = append(lines, l)
			}
			continue
		}
		if cur == nil {
			cur = &fencedBlock{lang: strings.TrimPrefix(trimmed, "```"), line: i + 1}
			lines = nil
			continue
		}
		cur.text = strings.Join(lines, "\n")
		out = append(out, *cur)
		cur = nil
	}
	return out
}

// squash joins every run of white space into one blank, so indentation
// and line breaks do not decide whether a snippet matches.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
