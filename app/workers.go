package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cellgate/cellgate/gen/db"
	"github.com/cellgate/cellgate/gen/jobkinds"
	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// WorkerDeps are what the workers need from the runtime besides each job's
// shard accessor. There is no Enqueuer here: the job runtime is built from
// the workers, so it does not exist yet when they are.
type WorkerDeps struct {
	// Log is the structured logger (nil: slog.Default()).
	Log *slog.Logger
}

// Workers implements jobkinds.Workers: one method per job kind in
// schema/app.cue. cmd/server registers it with jobkinds.RegisterWorkers, so
// a kind added to the spec without its method here fails the build.
type Workers struct {
	d WorkerDeps
}

var _ jobkinds.Workers = (*Workers)(nil)

// NewWorkers returns the example app's workers.
func NewWorkers(d WorkerDeps) *Workers {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Workers{d: d}
}

// SendWelcome welcomes a new account. sh is the accessor to the shard of
// the job's tenant (RegisterWorkers builds it; a job takes no database
// permit). A job without a tenant, or an account that is gone by the time
// the job runs, is not retried: jobs.Permanent.
func (w *Workers) SendWelcome(ctx context.Context, job *jobs.Job[jobkinds.SendWelcomeArgs], sh shards.Accessor) error {
	if err := sh.Err(); err != nil {
		return jobs.Permanent(err)
	}
	var acct db.Account
	err := sh.Conn(ctx, func(conn *pgxpool.Conn) error {
		var err error
		acct, err = db.New(conn).GetAccount(ctx, db.GetAccountParams{TenantID: sh.Tenant(), ID: job.Args.AccountID})
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return jobs.Permanent(fmt.Errorf("account %d of tenant %q no longer exists", job.Args.AccountID, sh.Tenant()))
	case err != nil:
		return err
	}
	// A real app would call its mail provider here; the example logs.
	// job.Log carries the job's ids and its trace id.
	job.Log(ctx, w.d.Log).Info("welcome sent", "account_id", acct.ID, "email", acct.Email)
	return nil
}
