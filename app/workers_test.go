package app_test

// Worker tests: call the worker method with celltest.Work, as the job
// runtime would run one attempt, on databases of the test's own.

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/app"
	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/celltest"
	"github.com/cellgate/cellgate/internal/jobs"
	cgsql "github.com/cellgate/cellgate/sql"
)

// TestSendWelcome runs the job SignUp enqueued through the worker.
func TestSendWelcome(t *testing.T) {
	t.Parallel()
	cell, h := newServer(t)
	var logs bytes.Buffer
	w := app.NewWorkers(app.WorkerDeps{Log: slog.New(slog.NewTextHandler(&logs, nil))})

	_, body := do(t, h, "acme", "POST", "/signup", `{"email":"a@acme.test"}`)
	acct := decode[db.Account](t, body)
	job := celltest.RequireEnqueued[jobkinds.SendWelcomeArgs](t, cell, "acme", nil)
	if err := celltest.Work(celltest.Tenant(t, "acme"), cell.Shards, w.SendWelcome, job.Args); err != nil {
		t.Fatalf("SendWelcome: %v", err)
	}
	if !strings.Contains(logs.String(), "welcome sent") || !strings.Contains(logs.String(), "email=a@acme.test") {
		t.Fatalf("no welcome logged for account %d:\n%s", acct.ID, logs.String())
	}
}

// TestSendWelcomeGivesUp: an account that does not exist (for this tenant)
// is a permanent failure, not a retry.
func TestSendWelcomeGivesUp(t *testing.T) {
	t.Parallel()
	cell := celltest.Start(t, spec.Config(), celltest.Options{Migrate: cgsql.Migrate})
	w := app.NewWorkers(app.WorkerDeps{})
	acct, err := createAccount(t, cell, "acme", "a@acme.test")
	if err != nil {
		t.Fatal(err)
	}
	args := jobkinds.SendWelcomeArgs{AccountID: acct.ID, Email: acct.Email}
	if err := celltest.Work(celltest.Tenant(t, "acme"), cell.Shards, w.SendWelcome, args); err != nil {
		t.Fatalf("own account: %v", err)
	}
	for _, tenant := range []string{"globex", ""} {
		ctx := t.Context()
		if tenant != "" {
			ctx = celltest.Tenant(t, tenant)
		}
		err := celltest.Work(ctx, cell.Shards, w.SendWelcome, args)
		if err == nil || !jobs.IsPermanent(err) {
			t.Errorf("tenant %q: err = %v, want a permanent error", tenant, err)
		}
	}
}

// createAccount writes a fixture row straight into the tenant's shard.
func createAccount(t *testing.T, cell *celltest.Cell, tenant, email string) (db.Account, error) {
	t.Helper()
	sh, slot, err := cell.Shards.ForTenant(tenant)
	if err != nil {
		return db.Account{}, err
	}
	return db.New(sh.Pool).CreateAccount(t.Context(), db.CreateAccountParams{TenantID: tenant, Slot: int32(slot), Email: email})
}
