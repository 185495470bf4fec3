package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// payload is every benchmark job's arguments, on both sides.
type payload struct {
	// N numbers the job within its shape.
	N int `json:"n"`
	// Tenant names the enqueuing tenant in the noisy shape's args, so
	// both sides' jobs carry the same bytes (River has no tenant column).
	Tenant string `json:"tenant,omitempty"`
	// Quiet marks a quiet tenant's job in the noisy shape.
	Quiet bool `json:"quiet,omitempty"`
	// At is when the job was enqueued (Unix nanoseconds), for waits.
	At int64 `json:"at,omitempty"`
}

// side is one job system under test, on its own database. The shapes
// drive both sides through it in the same way; a side's methods are used
// by one phase at a time.
type side interface {
	// Name is "cellgate" or "river".
	Name() string
	// Pool is the job system's pool (its database's), for the CPU meter.
	Pool() *pgxpool.Pool
	// Reset empties the jobs and signups tables (and vacuums them), so
	// every phase starts on the same empty state.
	Reset(ctx context.Context) error
	// Analyze gathers the jobs table's planner statistics (analyzeJobs).
	Analyze(ctx context.Context) error
	// Start starts a client with workers workers whose no-op handler calls
	// run with the job's args.
	Start(ctx context.Context, workers int, run func(p *payload)) error
	// Stop stops the client started by Start.
	Stop(ctx context.Context) error
	// EnqueueMany inserts ps as tenant's jobs in one call.
	EnqueueMany(ctx context.Context, tenant string, ps []payload) error
	// Enqueue inserts one job of tenant's.
	Enqueue(ctx context.Context, tenant string, p payload) error
	// SignupTx is the tx shape's unit: one transaction that writes a
	// signups row and enqueues one job of tenant's, then commits.
	SignupTx(ctx context.Context, tenant string, p payload) error
}

// signupsDDL is the table the tx shape writes, on both sides.
const signupsDDL = `CREATE TABLE signups (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant     text NOT NULL,
    email      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`

const insertSignup = `INSERT INTO signups (tenant, email) VALUES ($1, $2)`
