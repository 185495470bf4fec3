package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the River side's job kind.
type riverArgs payload

func (riverArgs) Kind() string { return "peers_noop" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	run func(p *payload)
}

func (w *riverWorker) Work(_ context.Context, j *river.Job[riverArgs]) error {
	w.run((*payload)(&j.Args))
	return nil
}

// riverSide is River with riverpgxv5, tuned as River's own benchmark
// (`river bench`) tunes it: FetchCooldown 2ms, FetchPollInterval 20ms,
// one queue with the shape's worker count.
type riverSide struct {
	pools
	c *river.Client[pgx.Tx]
}

func newRiver(ctx context.Context, dsn string, conns, appConns int32) (*riverSide, error) {
	p, err := openPools(ctx, dsn, conns, appConns)
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(p.pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	return &riverSide{pools: p}, nil
}

func (s *riverSide) Name() string { return "river" }

func (s *riverSide) Reset(ctx context.Context) error {
	return resetTables(ctx, s.pool, "river_job")
}

func (s *riverSide) Analyze(ctx context.Context) error {
	return analyzeJobs(ctx, s.pool, "river_job")
}

func (s *riverSide) Start(ctx context.Context, workers int, run func(p *payload)) error {
	w := river.NewWorkers()
	river.AddWorker(w, &riverWorker{run: run})
	var err error
	s.c, err = river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		// River's benchmark settings (`river bench`): fetch at most
		// every 2ms, poll every 20ms without notifications.
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           w,
	})
	if err != nil {
		return err
	}
	return s.c.Start(ctx)
}

func (s *riverSide) Stop(ctx context.Context) error {
	err := s.c.Stop(ctx)
	s.c = nil
	s.release()
	return err
}

// EnqueueMany ignores the tenant: River has no tenants, a River user puts
// every tenant's jobs in one queue.
func (s *riverSide) EnqueueMany(ctx context.Context, tenantID string, ps []payload) error {
	params := make([]river.InsertManyParams, len(ps))
	for i := range ps {
		params[i].Args = riverArgs(ps[i])
	}
	_, err := s.c.InsertMany(ctx, params)
	return err
}

func (s *riverSide) Enqueue(ctx context.Context, tenantID string, p payload) error {
	_, err := s.c.Insert(ctx, riverArgs(p), nil)
	return err
}

func (s *riverSide) SignupTx(ctx context.Context, tenantID string, p payload) error {
	return s.signupTx(ctx, tenantID, p.N, func(tx pgx.Tx) error {
		_, err := s.c.InsertTx(ctx, tx, riverArgs(p), nil)
		return err
	})
}
