package celltest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/gen/spec"
	"github.com/cellgate/cellgate/internal/celltest"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
	cgsql "github.com/cellgate/cellgate/sql"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does, so a test can see a helper fail.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// mustFail runs fn with a recorder and returns its Fatalf message, failing
// t when fn did not fail.
func mustFail(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	if r.msg == "" {
		t.Fatal("the helper did not fail")
	}
	return r.msg
}

// TestRequireEnqueuedTx: a job written in a transaction is seen by it, with
// its args, tenant and spec; other args, a second job and a rolled-back
// transaction are told apart.
func TestRequireEnqueuedTx(t *testing.T) {
	cell := celltest.Start(t, spec.Config(), celltest.Options{Migrate: cgsql.Migrate})
	ctx := celltest.Tenant(t, "acme")
	sh, _, err := cell.Shards.ForTenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	args := jobkinds.SendWelcomeArgs{AccountID: 7, Email: "a@acme.test"}
	other := jobkinds.SendWelcomeArgs{AccountID: 8, Email: "b@acme.test"}

	cell.RollbackTx(t, sh, func(tx shards.Tx) {
		celltest.RequireNotEnqueuedTx[jobkinds.SendWelcomeArgs](t, tx, nil)
		if _, err := cell.Jobs.EnqueueTx(ctx, tx, args); err != nil {
			t.Fatal(err)
		}
		job := celltest.RequireEnqueuedTx(t, tx, &args)
		if job.Args != args || job.Tenant != "acme" || job.Kind != "send_welcome" ||
			job.MaxAttempts != jobkinds.SendWelcome.MaxAttempts || job.ID <= 0 {
			t.Errorf("job = %+v", job)
		}
		celltest.RequireEnqueuedTx[jobkinds.SendWelcomeArgs](t, tx, nil)
		celltest.RequireNotEnqueuedTx(t, tx, &other)

		msg := mustFail(t, func(tb testing.TB) { celltest.RequireEnqueuedTx(tb, tx, &other) })
		if want := `found 0 "send_welcome" jobs with args {"account_id":8,"email":"b@acme.test"} in ` + sh.Name; !strings.Contains(msg, want) {
			t.Errorf("failure %q does not contain %q", msg, want)
		}
		mustFail(t, func(tb testing.TB) { celltest.RequireNotEnqueuedTx(tb, tx, &args) })

		if _, err := cell.Jobs.EnqueueTx(ctx, tx, other); err != nil {
			t.Fatal(err)
		}
		msg = mustFail(t, func(tb testing.TB) { celltest.RequireEnqueuedTx[jobkinds.SendWelcomeArgs](tb, tx, nil) })
		if !strings.Contains(msg, `found 2 "send_welcome" jobs`) {
			t.Errorf("two jobs: failure %q", msg)
		}
	})
	// Rolled back: the jobs are gone with the transaction.
	cell.JobsTx(t, "acme", func(tx shards.Tx) {
		celltest.RequireNotEnqueuedTx[jobkinds.SendWelcomeArgs](t, tx, nil)
	})
	mustFail(t, func(tb testing.TB) { celltest.RequireEnqueued(tb, cell, "acme", &args) })

	// Committed: RequireEnqueued finds it, for its tenant only.
	err = sh.Tx(ctx, func(tx shards.Tx) error {
		_, err := cell.Jobs.EnqueueTx(ctx, tx, args)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	celltest.RequireEnqueued(t, cell, "acme", &args)
	// A tenant on the same shard sees acme's job through the shard's table,
	// but RequireEnqueued also checks the tenant.
	peer := sameShardTenant(t, cell, sh)
	msg := mustFail(t, func(tb testing.TB) { celltest.RequireEnqueued(tb, cell, peer, &args) })
	if !strings.Contains(msg, `belongs to tenant "acme"`) {
		t.Errorf("other tenant: failure %q", msg)
	}
}

// sameShardTenant finds another tenant whose slot is on sh.
func sameShardTenant(t *testing.T, cell *celltest.Cell, sh *shards.Shard) string {
	for i := range 100 {
		id := fmt.Sprintf("peer-%d", i)
		if s, _, err := cell.Shards.ForTenant(id); err == nil && s == sh {
			return id
		}
	}
	t.Fatal("no tenant of the same shard in 100 tries")
	return ""
}

// TestWork: the worker gets the context's tenant, its accessor, the
// kind's spec and a deadline at the kind's timeout, and its error back.
func TestWork(t *testing.T) {
	args := jobkinds.SendWelcomeArgs{AccountID: 1}
	boom := errors.New("boom")
	// No databases: the accessor is the one of a nil set.
	err := celltest.Work(celltest.Tenant(t, "acme"), nil, func(ctx context.Context, job *jobs.Job[jobkinds.SendWelcomeArgs], sh shards.Accessor) error {
		if tn, _ := tenant.From(ctx); tn != "acme" || job.Tenant != "acme" || sh.Tenant() != "acme" {
			t.Errorf("tenant: ctx %q, job %q, accessor %q", tn, job.Tenant, sh.Tenant())
		}
		if sh.Permits() != nil || !errors.Is(sh.Err(), shards.ErrNoDatabases) {
			t.Errorf("accessor: permits %v, err %v", sh.Permits(), sh.Err())
		}
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > jobkinds.SendWelcome.Timeout {
			t.Errorf("deadline %v (%v), want within the kind's %v", dl, ok, jobkinds.SendWelcome.Timeout)
		}
		if job.Args != args || job.Attempt != 1 || job.Kind != "send_welcome" {
			t.Errorf("job = %+v", job)
		}
		return boom
	}, args)
	if !errors.Is(err, boom) {
		t.Fatalf("Work returned %v, want the worker's error", err)
	}
}
