package pgjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
	"github.com/cellgate/cellgate/internal/shards"
)

// ErrShardJobsNotReady is returned by an in-transaction enqueue on a shard
// whose jobs table the runtime has not created yet (it migrates the shards
// in the background after boot, retrying while a shard is down).
var ErrShardJobsNotReady = errors.New("jobs: the shard's jobs table is still being created (the job runtime migrates shards in the background after boot); retry shortly")

// insert adds a job; see jobs.Backend. Plain enqueues without a uniqueness
// key are coalesced with concurrent ones into one INSERT, and every plain
// enqueue passes the circuit breaker when the backend has one. Insert
// returns once the job is committed. InsertTx writes one with the caller's
// transaction instead.
//
// If ctx ends while a coalesced insert is in flight, Insert returns
// ctx.Err() and the job may still have been inserted, as with any write
// whose caller stopped waiting.
func (b *DB) insert(ctx context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	if b.brk == nil {
		return b.insertPlain(ctx, p)
	}
	if err := b.brk.allow(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	r, err := b.insertPlain(ctx, p)
	if errors.Is(err, jobs.ErrClosed) {
		b.brk.done(context.Canceled) // says nothing about the database
	} else {
		b.brk.done(err)
	}
	return r, err
}

// insertTx writes one job with the caller's transaction tx, which must run
// on this database: one statement, so the job
// exists if and only if tx commits. It does not use the circuit breaker: the
// caller's own transaction already proves the database answers. The NOTIFY
// follows after the caller has (probably) committed; see notify.go.
func (b *DB) insertTx(ctx context.Context, stx shards.Tx, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return jobs.EnqueueResult{}, err
	}
	tx := stx.Tx
	if tx == nil {
		return jobs.EnqueueResult{}, errors.New("pgjobs: enqueue in a transaction: nil tx")
	}
	if err := b.ensureTenant(ctx, p.Tenant); err != nil {
		return jobs.EnqueueResult{}, err
	}
	now := b.now()
	runAt := runAtOf(p, now)
	id, dup, err := insertOne(ctx, tx, p, uniqueKey(p), runAt, now)
	if err != nil {
		return jobs.EnqueueResult{}, fmt.Errorf("pgjobs: enqueue %s in a transaction on %s: %w", p.Kind, b.name, err)
	}
	if !dup {
		// A wake-up that finds nothing (the caller rolled back) costs one
		// empty claim.
		if runAt.After(now) {
			b.wakeAt(runAt)
		} else {
			b.notifyAfterTx(p.Tenant)
		}
	}
	return jobs.EnqueueResult{ID: jobs.JobID(id), Duplicate: dup}, nil
}

func runAtOf(p jobs.InsertParams, now time.Time) time.Time {
	if p.RunAt.IsZero() || p.RunAt.Before(now) {
		return now
	}
	return p.RunAt
}

func uniqueKey(p jobs.InsertParams) *string {
	if p.UniqueKey == "" {
		return nil
	}
	return &p.UniqueKey
}

const sqlInsertOne = `SELECT job_id, duplicate FROM cellgate_jobs_insert($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// sqlInsertPlaced inserts one job without a unique key ($1 kind, $2
// queue, $3 tenant, $4 args, $5 max attempts, $6 run at, $7 now, $8
// priority) and places it as cellgate_jobs_insert places such a job
// (migration 000011): a job coming due later waits unplaced; a tenant with
// a cap holds a job past its quota, or behind a held job of its own. It
// is the statement that function runs, sent as a statement of its own: a
// call of the PL/pgSQL function cost about 30 µs of server time per job
// more than its statement (pg_stat_statements, one session enqueueing in
// transactions of its own), which is most of what a transactional enqueue
// costs PostgreSQL beyond the row and its indexes. A unique job still goes
// through the function, which retries when the job it collided with ends
// meanwhile. The function keeps its branch for other jobs, which processes
// of the previous release call during a rolling upgrade; a migration that
// changes how jobs are placed changes both
// (TestInsertPlacedPlacesAsTheFunction compares them).
//
// The lookups need no planner settings: each has one index matching its
// equality and order (tests: TestStatementsScanEachLookupOnce checks the
// generic plan).
const sqlInsertPlaced = `
INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime, held, priority)
SELECT $1, $2, $3, $4, $5, $6, $7, CASE WHEN NOT r.held THEN r.place END, coalesce(r.held, false), $8
FROM (SELECT pl.place,
             CASE WHEN $6::timestamptz > $7::timestamptz THEN NULL
                  WHEN s.quota IS NULL THEN false
                  WHEN pl.place > h.head + s.quota * s.step THEN true
                  ELSE EXISTS (SELECT 1 FROM cellgate_jobs y
                               WHERE y.state = 'available' AND y.held AND y.tenant = $3)
             END AS held
      FROM (SELECT coalesce((SELECT hd.vtime FROM cellgate_jobs_head hd), 0) AS head OFFSET 0) h
      LEFT JOIN (SELECT greatest(720720 / lim.weight, 1)::bigint AS step,
                        CASE WHEN lim.max_running > 0 THEN greatest(lim.max_running, 32) END AS quota
                 FROM cellgate_jobs_tenant_limits lim
                 WHERE lim.tenant = $3) s ON true
      CROSS JOIN LATERAL (
          SELECT CASE WHEN $6::timestamptz <= $7::timestamptz
                      THEN greatest(coalesce((SELECT x.vtime FROM cellgate_jobs x
                                              WHERE x.state = 'available' AND x.vtime IS NOT NULL
                                                AND x.tenant = $3 AND x.vtime > h.head
                                              ORDER BY x.vtime DESC
                                              LIMIT 1), 0), h.head) + coalesce(s.step, 720720)
                 END AS place OFFSET 0) pl OFFSET 0) r
RETURNING id, false`

// sqlSetTrace sets the trace context the jobs table's trace_context
// column takes by default (migration 000005), for the rest of the
// transaction; "" clears it.
const sqlSetTrace = `SELECT set_config('cellgate.trace_context', $1, true)`

// insertOne inserts one job: through cellgate_jobs_insert when it has a
// unique key, else with sqlInsertPlaced. A job with a trace context is one
// pipelined batch: set the context, insert, clear it, in one round trip
// and one transaction (the caller's, or the implicit one of the batch).
func insertOne(ctx context.Context, s querier, p jobs.InsertParams, unique *string, runAt, now time.Time) (id int64, dup bool, err error) {
	sql, args := insertStatement(&p, unique, runAt, now)
	if p.TraceContext == nil {
		err = s.QueryRow(ctx, sql, args...).Scan(&id, &dup)
		return id, dup, err
	}
	tc, err := json.Marshal(p.TraceContext)
	if err != nil {
		return 0, false, err
	}
	batch := &pgx.Batch{}
	batch.Queue(sqlSetTrace, string(tc))
	batch.Queue(sql, args...)
	batch.Queue(sqlSetTrace, "")
	br := s.SendBatch(ctx, batch)
	if _, err = br.Exec(); err == nil {
		err = br.QueryRow().Scan(&id, &dup)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return id, dup, err
}

// insertStatement is the statement inserting p and its arguments (id
// and duplicate come back): cellgate_jobs_insert for a unique job,
// sqlInsertPlaced for any other.
func insertStatement(p *jobs.InsertParams, unique *string, runAt, now time.Time) (string, []any) {
	if unique != nil {
		return sqlInsertOne, []any{p.Kind, p.Queue, p.Tenant, p.EncodedArgs, int32(p.MaxAttempts), unique, runAt, now, priorityOf(p)}
	}
	return sqlInsertPlaced, []any{p.Kind, p.Queue, p.Tenant, p.EncodedArgs, int32(p.MaxAttempts), runAt, now, priorityOf(p)}
}

// insertPlain commits one job on its own. A unique job is inserted by the
// calling goroutine after this process's completions are written (so a job
// that completed here no longer counts as active); other jobs go through
// the coalescer.
func (b *DB) insertPlain(ctx context.Context, p jobs.InsertParams) (jobs.EnqueueResult, error) {
	if err := b.ensureTenant(ctx, p.Tenant); err != nil {
		return jobs.EnqueueResult{}, err
	}
	// A job with a trace context is inserted here too: the coalescer's
	// shared statement has one transaction for jobs of many traces.
	if p.UniqueKey != "" || p.TraceContext != nil {
		if err := b.flushDone(ctx); err != nil {
			return jobs.EnqueueResult{}, fmt.Errorf("pgjobs: enqueue %s on %s: %w", p.Kind, b.name, err)
		}
		now := b.now()
		runAt := runAtOf(p, now)
		id, dup, err := insertOne(ctx, b.pool, p, uniqueKey(p), runAt, now)
		if err != nil {
			return jobs.EnqueueResult{}, fmt.Errorf("pgjobs: enqueue %s on %s: %w", p.Kind, b.name, err)
		}
		if !dup {
			b.inserted(p.Tenant, runAt, now)
		}
		return jobs.EnqueueResult{ID: jobs.JobID(id), Duplicate: dup}, nil
	}

	r := reqPool.Get().(*insertReq)
	r.p = p
	select {
	case b.insCh <- r:
	case <-ctx.Done():
		r.p = jobs.InsertParams{}
		reqPool.Put(r)
		return jobs.EnqueueResult{}, ctx.Err()
	case <-b.quit:
		r.p = jobs.InsertParams{}
		reqPool.Put(r)
		return jobs.EnqueueResult{}, jobs.ErrClosed
	}
	select {
	case res := <-r.res:
		r.p = jobs.InsertParams{}
		reqPool.Put(r) // only once its answer is read: the inserter is done with it
		if res.err != nil {
			return jobs.EnqueueResult{}, res.err
		}
		return jobs.EnqueueResult{ID: res.id}, nil
	case <-ctx.Done():
		return jobs.EnqueueResult{}, ctx.Err()
	}
}

// inserted wakes the workers (of every process) for a job of tenant it
// committed.
func (b *DB) inserted(tenant string, runAt, now time.Time) {
	if runAt.After(now) {
		b.wakeAt(runAt)
	} else {
		b.readied(tenant)
		b.notifyNow()
	}
}

type insertReq struct {
	p   jobs.InsertParams
	res chan insertRes
}

type insertRes struct {
	id  jobs.JobID
	err error
}

var reqPool = sync.Pool{New: func() any { return &insertReq{res: make(chan insertRes, 1)} }}

// insertLoop is one inserter: it takes the enqueues that are waiting (up to
// InsertBatch) and commits them with one statement. While it waits for the
// commit, new enqueues queue up for the next inserter, so batches grow with
// load and an idle system inserts each job at once.
func (b *DB) insertLoop() {
	defer b.wg.Done()
	batch := make([]*insertReq, 0, b.cfg.InsertBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-b.insCh:
			batch = append(batch, r)
		case <-b.quit:
			return
		}
	more:
		for len(batch) < b.cfg.InsertBatch {
			select {
			case r := <-b.insCh:
				batch = append(batch, r)
			default:
				break more
			}
		}
		b.insertBatch(batch)
		for i := range batch {
			batch[i] = nil
		}
	}
}

func (b *DB) insertBatch(batch []*insertReq) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	now := b.now()
	fail := func(err error) {
		err = fmt.Errorf("pgjobs: enqueue on %s: %w", b.name, err)
		for _, r := range batch {
			r.res <- insertRes{err: err}
		}
	}
	if len(batch) == 1 {
		p := &batch[0].p
		runAt := runAtOf(*p, now)
		// A coalesced job has no uniqueness key and no trace context
		// (insertPlain sends those itself).
		id, _, err := insertOne(ctx, b.pool, *p, nil, runAt, now)
		if err != nil {
			fail(err)
			return
		}
		b.inserts.Add(1)
		b.insertedJobs.Add(1)
		b.inserted(p.Tenant, runAt, now)
		batch[0].res <- insertRes{id: jobs.JobID(id)}
		return
	}
	n := len(batch)
	kinds, queues, tenants, args := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	maxAttempts, runAts, prios := make([]int32, n), make([]time.Time, n), make([]int16, n)
	var ready []string // the tenants of the ready jobs
	var earliest time.Time
	for i, r := range batch {
		kinds[i], queues[i], tenants[i], args[i] = r.p.Kind, r.p.Queue, r.p.Tenant, string(r.p.EncodedArgs)
		maxAttempts[i] = int32(r.p.MaxAttempts)
		prios[i] = priorityOf(&r.p)
		runAts[i] = runAtOf(r.p, now)
		if runAts[i].After(now) {
			if earliest.IsZero() || runAts[i].Before(earliest) {
				earliest = runAts[i]
			}
		} else {
			ready = append(ready, tenants[i])
		}
	}
	rows, err := b.pool.Query(ctx, sqlInsertMany, kinds, queues, tenants, args, maxAttempts, runAts, now, prios)
	var ids []int64
	if err == nil {
		ids, err = readIDs(rows, n)
	}
	if err != nil {
		fail(err)
		return
	}
	b.inserts.Add(1)
	b.insertedJobs.Add(uint64(n))
	// Identity values follow the insert order, which is the input order.
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, r := range batch {
		r.res <- insertRes{id: jobs.JobID(ids[i])}
	}
	if len(ready) > 0 {
		// Named once committed: a NOTIFY sent meanwhile must not name a
		// tenant whose job a claim cannot see yet.
		b.readied(ready...)
		b.notifyNow()
	}
	if !earliest.IsZero() {
		b.wakeAt(earliest)
	}
}

func readIDs(rows pgx.Rows, n int) ([]int64, error) {
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("inserted %d jobs, want %d", len(ids), n)
	}
	return ids, nil
}

// sqlInsertMany inserts a batch and places its ready jobs in the fair
// order (cellgate_jobs_insert_many); ids come back in input order.
const sqlInsertMany = `SELECT job_id FROM cellgate_jobs_insert_many($1, $2, $3, $4, $5, $6, $7, $8)`

// insertMany inserts ps with one round trip and one commit, all or none
// (Backend.InsertMany), through the circuit breaker like insert. The runs
// of jobs without a uniqueness key go through cellgate_jobs_insert_many,
// each unique job through cellgate_jobs_insert, all as one pipelined batch
// in ps's order, so the fair order places the jobs of a tenant in ps's
// order and a unique job sees the jobs before it (an earlier element with
// its key makes it a Duplicate of that element's job).
func (b *DB) insertMany(ctx context.Context, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if b.brk != nil {
		if err := b.brk.allow(); err != nil {
			return nil, err
		}
	}
	out, err := b.insertManyNow(ctx, ps)
	if b.brk != nil {
		if errors.Is(err, jobs.ErrClosed) {
			b.brk.done(context.Canceled)
		} else {
			b.brk.done(err)
		}
	}
	return out, err
}

func (b *DB) insertManyNow(ctx context.Context, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	if err := b.ensureLimits(ctx, ps); err != nil {
		return nil, err
	}
	for i := range ps {
		if ps[i].UniqueKey != "" {
			// As insertPlain: a job that completed here no longer counts
			// as active.
			if err := b.flushDone(ctx); err != nil {
				return nil, fmt.Errorf("pgjobs: enqueue many on %s: %w", b.name, err)
			}
			break
		}
	}
	now := b.now()
	out, err := insertBatched(ctx, b.pool, ps, now)
	if err != nil {
		return nil, fmt.Errorf("pgjobs: enqueue many on %s: %w", b.name, err)
	}
	b.inserts.Add(1)
	b.insertedJobs.Add(uint64(len(ps)))
	ready, earliest := wakeOf(ps, out, now)
	if len(ready) > 0 {
		b.readied(ready...)
		b.notifyNow()
	}
	if !earliest.IsZero() {
		b.wakeAt(earliest)
	}
	return out, nil
}

// insertManyTx writes ps with the caller's transaction tx in one round trip
// (Backend.InsertManyTx), as insertMany does, and like insertTx without the
// circuit breaker; the jobs exist if and only if tx commits.
func (b *DB) insertManyTx(ctx context.Context, stx shards.Tx, ps []jobs.InsertParams) ([]jobs.EnqueueResult, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if stx.Tx == nil {
		return nil, errors.New("pgjobs: enqueue many in a transaction: nil tx")
	}
	if err := b.ensureLimits(ctx, ps); err != nil {
		return nil, err
	}
	now := b.now()
	out, err := insertBatched(ctx, stx.Tx, ps, now)
	if err != nil {
		return nil, fmt.Errorf("pgjobs: enqueue many in a transaction on %s: %w", b.name, err)
	}
	ready, earliest := wakeOf(ps, out, now)
	if len(ready) > 0 {
		b.notifyAfterTx(ready...)
	}
	if !earliest.IsZero() {
		b.wakeAt(earliest)
	}
	return out, nil
}

// wakeOf returns the tenants of the inserted (not duplicate) jobs that
// are ready, and the earliest run_at of those scheduled for later.
func wakeOf(ps []jobs.InsertParams, out []jobs.EnqueueResult, now time.Time) (ready []string, earliest time.Time) {
	for i := range ps {
		if out[i].Duplicate {
			continue
		}
		runAt := runAtOf(ps[i], now)
		if !runAt.After(now) {
			ready = append(ready, ps[i].Tenant)
		} else if earliest.IsZero() || runAt.Before(earliest) {
			earliest = runAt
		}
	}
	return ready, earliest
}

// batchSender is what insertBatched needs of a pool or a transaction.
// querier is a pool or a transaction, for insertOne.
type querier interface {
	batchSender
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// insertBatched sends ps as one pipelined batch: outside a transaction
// PostgreSQL runs it as one implicit transaction (one commit), inside one
// it joins it. A run of jobs without a uniqueness key is one
// cellgate_jobs_insert_many statement, a unique job one cellgate_jobs_insert.
func insertBatched(ctx context.Context, s batchSender, ps []jobs.InsertParams, now time.Time) ([]jobs.EnqueueResult, error) {
	out := make([]jobs.EnqueueResult, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	type stmt struct{ from, to int } // ps[from:to]; to == from+1 and unique: one insert
	var stmts []stmt
	batch := &pgx.Batch{}
	// The jobs of one enqueue share its trace context (see insertOne).
	var traced string
	if tc := ps[0].TraceContext; tc != nil {
		b, err := json.Marshal(tc)
		if err != nil {
			return nil, err
		}
		traced = string(b)
		batch.Queue(sqlSetTrace, traced)
	}
	for i := 0; i < len(ps); {
		if ps[i].UniqueKey != "" {
			p := &ps[i]
			batch.Queue(sqlInsertOne, p.Kind, p.Queue, p.Tenant, p.EncodedArgs, int32(p.MaxAttempts),
				p.UniqueKey, runAtOf(*p, now), now, priorityOf(p))
			stmts = append(stmts, stmt{i, i + 1})
			i++
			continue
		}
		j := i
		for j < len(ps) && ps[j].UniqueKey == "" {
			j++
		}
		n := j - i
		kinds, queues, tenants, args := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		maxAttempts, runAts, prios := make([]int32, n), make([]time.Time, n), make([]int16, n)
		for k := range n {
			p := &ps[i+k]
			kinds[k], queues[k], tenants[k], args[k] = p.Kind, p.Queue, p.Tenant, string(p.EncodedArgs)
			maxAttempts[k] = int32(p.MaxAttempts)
			prios[k] = priorityOf(p)
			runAts[k] = runAtOf(*p, now)
		}
		batch.Queue(sqlInsertMany, kinds, queues, tenants, args, maxAttempts, runAts, now, prios)
		stmts = append(stmts, stmt{i, j})
		i = j
	}
	if traced != "" {
		batch.Queue(sqlSetTrace, "")
	}
	br := s.SendBatch(ctx, batch)
	if traced != "" {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	for _, st := range stmts {
		if ps[st.from].UniqueKey != "" {
			var id int64
			var dup bool
			if err := br.QueryRow().Scan(&id, &dup); err != nil {
				_ = br.Close()
				return nil, fmt.Errorf("%s: %w", ps[st.from].Kind, err)
			}
			out[st.from] = jobs.EnqueueResult{ID: jobs.JobID(id), Duplicate: dup}
			continue
		}
		rows, err := br.Query()
		var ids []int64
		if err == nil {
			ids, err = readIDs(rows, st.to-st.from)
		}
		if err != nil {
			_ = br.Close()
			return nil, err
		}
		// Identity values follow the insert order, which is the input order.
		slices.Sort(ids)
		for k, id := range ids {
			out[st.from+k] = jobs.EnqueueResult{ID: jobs.JobID(id)}
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return out, nil
}
