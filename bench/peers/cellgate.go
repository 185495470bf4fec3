package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/jobs/pgjobs"
	"github.com/cellgate/cellgate/internal/shards"
	"github.com/cellgate/cellgate/internal/tenant"
	"github.com/jackc/pgx/v5"
)

// cgArgs is the cellgate side's job kind.
type cgArgs payload

func (cgArgs) JobSpec() jobs.KindSpec { return jobs.KindSpec{Name: "peers_noop"} }

// cellgateSide is our PostgreSQL backend (pgjobs.Backend; default settings,
// so fair claims, unless -cellgate-prefetch) driven by a jobs.Client, as a
// cell runs it.
type cellgateSide struct {
	pools
	cfg pgjobs.Config
	c   *jobs.Client
}

func newCellgate(ctx context.Context, dsn string, cfg pgjobs.Config, conns, appConns int32) (*cellgateSide, error) {
	if err := pgjobs.Migrate(ctx, dsn); err != nil {
		return nil, fmt.Errorf("cellgate: migrate: %w", err)
	}
	p, err := openPools(ctx, dsn, conns, appConns)
	if err != nil {
		return nil, err
	}
	return &cellgateSide{pools: p, cfg: cfg}, nil
}

func (s *cellgateSide) Name() string { return "cellgate" }

func (s *cellgateSide) Reset(ctx context.Context) error {
	return resetTables(ctx, s.pool, "cellgate_jobs")
}

func (s *cellgateSide) Analyze(ctx context.Context) error {
	return analyzeJobs(ctx, s.pool, "cellgate_jobs")
}

func (s *cellgateSide) Start(ctx context.Context, workers int, run func(p *payload)) error {
	quiet := slog.New(slog.DiscardHandler)
	b, err := pgjobs.NewPool(s.pool, s.cfg, pgjobs.Options{Logger: quiet})
	if err != nil {
		return err
	}
	w := jobs.NewWorkers()
	jobs.Register(w, func(_ context.Context, j *jobs.Job[cgArgs]) error {
		run((*payload)(&j.Args))
		return nil
	})
	s.c, err = jobs.NewClient(ctx, jobs.Config{Workers: workers}, b, w, jobs.Options{Logger: quiet})
	if err != nil {
		return err
	}
	return s.c.Start(ctx)
}

func (s *cellgateSide) Stop(ctx context.Context) error {
	_, err := s.c.Stop(ctx)
	s.c = nil
	s.release()
	return err
}

func (s *cellgateSide) EnqueueMany(ctx context.Context, tenantID string, ps []payload) error {
	args := make([]jobs.Args, len(ps))
	for i := range ps {
		args[i] = cgArgs(ps[i])
	}
	_, err := s.c.EnqueueMany(tenant.With(ctx, tenantID), args)
	return err
}

func (s *cellgateSide) Enqueue(ctx context.Context, tenantID string, p payload) error {
	_, err := s.c.Enqueue(tenant.With(ctx, tenantID), cgArgs(p))
	return err
}

func (s *cellgateSide) SignupTx(ctx context.Context, tenantID string, p payload) error {
	return s.signupTx(ctx, tenantID, p.N, func(tx pgx.Tx) error {
		_, err := s.c.EnqueueTx(tenant.With(ctx, tenantID), shards.WrapTx(tx, nil), cgArgs(p))
		return err
	})
}
