package jobs

import (
	"context"
	"fmt"

	"github.com/cellgate/cellgate/internal/shards"
)

// WorkFunc runs one attempt of a claimed job: the call a Middleware wraps.
// job is the backend's row: a middleware reads it (ID, Kind, Queue, Tenant,
// Attempt, MaxAttempts, EnqueuedAt) and must neither modify it nor keep it
// after the call returns, since the backend may reuse it once the outcome
// is recorded. ctx carries the job's tenant (tenant.From) and the kind's
// timeout.
type WorkFunc func(ctx context.Context, job *JobRow) error

// Middleware wraps every worker call of a Client, the hook for tracing,
// per-tenant logging and similar cross-cutting work: it returns a WorkFunc
// that does its work around next (or instead of it: returning without
// calling next ends the attempt with the returned error). It is called once
// per registered kind when the Client is built, not per job, so the chain
// costs no allocation per job; the WorkFunc it returns is called from many
// workers at once and must be safe for concurrent use. The error a
// middleware returns is the attempt's outcome, read as a handler's would be
// (nil completes, Permanent fails for good, Snooze snoozes, anything else is
// retried). A panic in a middleware is recovered like a handler's. A job of
// a kind with no registered worker never reaches the chain.
type Middleware func(next WorkFunc) WorkFunc

// InsertFunc inserts jobs: the call an InsertMiddleware wraps. tx points to
// the caller's transaction for EnqueueTx and EnqueueManyTx, nil otherwise; ps
// holds one element per job (one for Enqueue and EnqueueTx), validated and
// encoded, and the results are one per element, in order.
type InsertFunc func(ctx context.Context, tx *shards.Tx, ps []InsertParams) ([]EnqueueResult, error)

// InsertMiddleware wraps every Enqueue, EnqueueTx, EnqueueMany and
// EnqueueManyTx of a Client, after the arguments are validated and encoded
// and before the backend sees them. It may read or adjust ps (a delay, say),
// or refuse the insert by returning an error without calling next (the
// enqueue then returns that error and nothing is inserted). It is called
// once when the Client is built; the InsertFunc it returns must be safe for
// concurrent use.
type InsertMiddleware func(next InsertFunc) InsertFunc

// chainWork wraps run in mws, mws[0] outermost; with no middleware it is run
// itself, so a Client without middleware pays nothing per job.
func chainWork(run WorkFunc, mws []Middleware) WorkFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		run = mws[i](run)
	}
	return run
}

// chainInsert is chainWork for inserts; nil when there is no middleware,
// so the enqueue paths call the backend directly.
func (c *Client) chainInsert(mws []InsertMiddleware) InsertFunc {
	if len(mws) == 0 {
		return nil
	}
	var f InsertFunc = c.insertDirect
	for i := len(mws) - 1; i >= 0; i-- {
		f = mws[i](f)
	}
	return f
}

// insertDirect is the innermost InsertFunc: the backend call the enqueue
// would have made without middleware.
func (c *Client) insertDirect(ctx context.Context, tx *shards.Tx, ps []InsertParams) ([]EnqueueResult, error) {
	if len(ps) == 1 {
		var r EnqueueResult
		var err error
		if tx == nil {
			r, err = c.backend.Insert(ctx, ps[0])
		} else {
			r, err = c.backend.InsertTx(ctx, *tx, ps[0])
		}
		if err != nil {
			return nil, err
		}
		return []EnqueueResult{r}, nil
	}
	if tx == nil {
		return c.backend.InsertMany(ctx, ps)
	}
	return c.backend.InsertManyTx(ctx, *tx, ps)
}

// insertOne runs the insert middleware for a single enqueue.
func (c *Client) insertOne(ctx context.Context, tx *shards.Tx, p InsertParams) (EnqueueResult, error) {
	rs, err := c.insertMany(ctx, tx, []InsertParams{p})
	if err != nil {
		return EnqueueResult{}, err
	}
	return rs[0], nil
}

// insertMany runs the insert middleware for several jobs and checks that
// it answered for each.
func (c *Client) insertMany(ctx context.Context, tx *shards.Tx, ps []InsertParams) ([]EnqueueResult, error) {
	rs, err := c.insert(ctx, tx, ps)
	if err != nil {
		return nil, err
	}
	if len(rs) != len(ps) {
		return nil, errInsertResults(len(rs), len(ps))
	}
	return rs, nil
}

func errInsertResults(got, want int) error {
	return fmt.Errorf("jobs: the insert middleware returned %d results for %d jobs", got, want)
}
