package pgjobs

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/cellgate/cellgate/internal/jobs"
)

// dbTimeout bounds the backend's own statements (claims, flushes,
// maintenance), which run on no caller's context.
const dbTimeout = 30 * time.Second

// claim blocks until the fetcher hands worker a job; see jobs.Backend. One
// goroutine per worker index may call it at a time.
func (b *DB) claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if worker < 0 || worker >= len(b.waiters) {
		return nil, fmt.Errorf("pgjobs: Claim: worker %d out of range [0, %d)", worker, len(b.waiters))
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.quit:
		return nil, jobs.ErrClosed
	}
	w := &b.waiters[worker]
	b.mu.Lock()
	if b.isClosed() {
		b.mu.Unlock()
		return nil, jobs.ErrClosed
	}
	if w.called {
		b.returned++
	}
	w.called = true
	if row := b.stash.pop(); row != nil {
		low := b.lowLocked()
		b.mu.Unlock()
		if low {
			signal(b.demand)
		}
		return row, nil
	}
	w.queued = true
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	signal(b.demand)

	var err error
	select {
	case row := <-w.ch:
		return row, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-b.quit:
		err = jobs.ErrClosed
	}
	b.mu.Lock()
	if w.queued {
		b.dequeue(w)
		b.mu.Unlock()
		return nil, err
	}
	// The fetcher handed us a row as we gave up: pass it on.
	row := <-w.ch
	if !b.isClosed() {
		b.handOffLocked(row)
		b.mu.Unlock()
		return nil, err
	}
	b.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	if rerr := b.release(rctx, []*jobs.JobRow{row}); rerr != nil {
		b.logErr("release", "pgjobs: handing back an unstarted job failed; it will be rescued", rerr)
	}
	return nil, err
}

// dequeue removes w from the wait queue. b.mu must be held.
func (b *DB) dequeue(w *waiter) {
	for i, x := range b.queue {
		if x == w {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			break
		}
	}
	w.queued = false
}

// handOffLocked gives row to the longest-waiting worker, or stashes it for
// the next Claim. b.mu must be held.
func (b *DB) handOffLocked(row *jobs.JobRow) {
	if len(b.queue) == 0 {
		b.stash.push(row)
		return
	}
	w := b.queue[0]
	copy(b.queue, b.queue[1:])
	b.queue[len(b.queue)-1] = nil
	b.queue = b.queue[:len(b.queue)-1]
	w.queued = false
	w.ch <- row // room for one: a queued waiter's channel is empty
}

// claimBatch writes the buffered completions and claims up to n jobs in one
// statement (one round trip, one transaction), then hands the jobs to the
// waiting workers and stashes the rest. n was reserved at mark (see
// fetchLoop); claimBatch gives the reservation back. It returns how many
// jobs it claimed.
func (b *DB) claimBatch(n int, mark flightMark) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	var turns []string
	if b.fair {
		if err := b.findTenants(ctx, b.now()); err != nil {
			b.mu.Lock()
			b.landedLocked(n, mark)
			b.mu.Unlock()
			return 0, fmt.Errorf("pgjobs: finding tenants with ready jobs on %s: %w", b.name, err)
		}
		// More turns than jobs wanted: a tenant may have fewer ready jobs
		// than turns, and the claim gives the turns whose job it did not
		// take back. Half as many again: fewer leave claims short while
		// tenants sit at their caps, more lock jobs only to give their
		// turns back (both measured slower, docs/jobs-postgres.md, "Where
		// fair-caps-over-fifo goes"). At least minTurns, so that a claim
		// for one job still looks past a few tenants that ran dry.
		b.mu.Lock()
		turns = b.turns.pick(max(n+n/2+1, minTurns), b.now(), b.roomOfLocked)
		b.mu.Unlock()
	}
	done := b.takeDone()
	ids, attempts := splitDone(done)
	now := b.now()
	var rows pgx.Rows
	var err error
	if b.fair {
		rows, err = b.pool.Query(ctx, b.turnsSQL, now, n, turns, b.capKinds, b.caps, b.claimedBy,
			ids, attempts, int32(placePerClaim*b.cfg.ClaimBatch))
	} else {
		rows, err = b.pool.Query(ctx, b.claimSQL, now, n, false, b.capKinds, b.caps, b.cfg.CapLookahead, b.claimedBy,
			ids, attempts, int32(placePerClaim*b.cfg.ClaimBatch))
	}
	var rowsOut []*jobs.JobRow
	if err == nil {
		rowsOut, err = b.readClaim(rows, turns)
	}
	if err != nil {
		// The completions are written again: a no-op if they were. The
		// claim rolled back, unless the connection died before its answer
		// came: then releaseLost hands its jobs back.
		b.putBackDone(done)
		if mayHaveCommitted(err) {
			b.lostClaims = append(b.lostClaims, now)
		}
	} else {
		b.noteWritten(done)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.landedLocked(n, mark)
	b.claims++
	b.claimed += uint64(len(rowsOut))
	if err != nil {
		return 0, fmt.Errorf("pgjobs: claim on %s: %w", b.name, err)
	}
	for _, r := range rowsOut {
		b.holdLocked(r)
		b.handOffLocked(r)
	}
	return len(rowsOut), nil
}

// placePerClaim × ClaimBatch is how many due jobs without a place (jobs
// that were scheduled, retried or rescued) a fair claim makes ready before
// it claims: more than a claim can take, so a backlog of such jobs becomes
// ready faster than it is claimed, and few enough that one claim stays
// short (it costs about as much per job as claiming).
const placePerClaim = 2

// readClaim reads a claim's jobs in claim order. A fair claim's answer
// ends with a row without a job that settles the turns (see settleClaim).
func (b *DB) readClaim(rows pgx.Rows, turns []string) ([]*jobs.JobRow, error) {
	defer rows.Close()
	type ordered struct {
		row *jobs.JobRow
		ord int32
	}
	var out []ordered
	traced := b.claimSQL == sqlClaimTraced
	var rooms []int32
	var found, readied []string
	for rows.Next() {
		r := &jobs.JobRow{Handle: b}
		var id pgtype.Int8
		var attempt, maxAttempts, ord int32
		var rowRooms []int32
		var rowFound, rowReadied []string
		dest := [...]any{&id, &r.Kind, &r.Queue, &r.Tenant, &r.EncodedArgs, &attempt, &maxAttempts, &r.EnqueuedAt, &ord,
			&rowRooms, &rowFound, &rowReadied, &r.TraceContext}
		var scan []any
		switch {
		case b.fair && traced:
			scan = dest[:]
		case b.fair:
			scan = dest[:12]
		case traced:
			scan = append(dest[:9], &r.TraceContext)
		default:
			scan = dest[:9]
		}
		if err := rows.Scan(scan...); err != nil {
			return nil, err
		}
		if !id.Valid {
			rooms, found, readied = rowRooms, rowFound, rowReadied // the turns' row
			continue
		}
		r.ID, r.Attempt, r.MaxAttempts = jobs.JobID(id.Int64), int(attempt), int(maxAttempts)
		out = append(out, ordered{r, ord})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ord < out[j].ord })
	res := make([]*jobs.JobRow, len(out))
	for i := range out {
		res[i] = out[i].row
	}
	if b.fair {
		b.settleClaim(turns, rooms, found, readied, res)
	}
	return res, nil
}

// settleClaim settles the turns with a fair claim's answer, for a claim
// on turns: the named tenants' rooms under their caps as PostgreSQL
// counted them (-1: no cap), in the order of their first turns; the
// tenant of each ready job found; the jobs claimed; and the tenants with
// jobs the claim made ready, which the turns take in.
//
// A tenant pays for the turns whose job it got, and for one turn more
// when it ran dry (it had no ready job for a turn although it had room,
// and got every job found for it): it then leaves the turns until it is
// found again. Its other turns go back: those whose job was found but not
// claimed (past the claim's limit, or left out by a kind's cap), and the
// rest of those it had no job for, which a claim naming it for many turns
// would otherwise charge it with.
func (b *DB) settleClaim(turns []string, rooms []int32, found, readied []string, claimed []*jobs.JobRow) {
	now := b.now()
	tenants, counts := tally(turns)
	nFound := make(map[string]int, len(tenants))
	for _, s := range found {
		nFound[s]++
	}
	nClaimed := make(map[string]int, len(tenants))
	for _, r := range claimed {
		nClaimed[r.Tenant]++
	}
	for i, s := range tenants {
		asked, got := int(counts[i]), nClaimed[s]
		full := i < len(rooms) && rooms[i] >= 0 && int(rooms[i]) < asked
		dry := !full && nFound[s] < asked && got == nFound[s]
		paid := got
		if dry {
			paid++
		}
		var room int // as this process counts it once the claim's jobs are held
		if full {
			b.mu.Lock()
			room = b.roomOfLocked(s) - got // they are not held yet
			b.mu.Unlock()
		}
		b.turns.settle(s, asked-paid, dry, full, room, now)
	}
	for _, s := range readied {
		b.turns.activate(s, b.limitsOf(s).weight)
	}
	b.turns.settled()
}

// sqlClaimTurns is the fair claim: at most $2 jobs on the turns $3, the
// tenant of each in turn order (migrations 000013 and 000014). The jobs
// come in the order of their tenants' first turns.
const sqlClaimTurns = `
SELECT job_id, job_kind, job_queue, job_tenant, job_args, job_attempt, job_max_attempts, job_created_at, job_ord,
       turn_rooms, turn_found, turn_readied
FROM cellgate_jobs_claim_turns($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// sqlClaimTurnsTraced is sqlClaimTurns with each job's stored trace
// context, as sqlClaimTraced.
const sqlClaimTurnsTraced = `
SELECT c.job_id, c.job_kind, c.job_queue, c.job_tenant, c.job_args, c.job_attempt, c.job_max_attempts, c.job_created_at, c.job_ord,
       c.turn_rooms, c.turn_found, c.turn_readied, j.trace_context
FROM cellgate_jobs_claim_turns($1, $2, $3, $4, $5, $6, $7, $8, $9) c
LEFT JOIN cellgate_jobs j ON j.id = c.job_id`

const sqlClaim = `
SELECT job_id, job_kind, job_queue, job_tenant, job_args, job_attempt, job_max_attempts, job_created_at, job_ord
FROM cellgate_jobs_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// sqlClaimTraced is sqlClaim with each job's stored trace context. The
// join reads the row as it was before the claim's update, which is the
// same trace context.
const sqlClaimTraced = `
SELECT c.job_id, c.job_kind, c.job_queue, c.job_tenant, c.job_args, c.job_attempt, c.job_max_attempts, c.job_created_at, c.job_ord,
       j.trace_context
FROM cellgate_jobs_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) c
LEFT JOIN cellgate_jobs j ON j.id = c.job_id`

// release hands claimed jobs that never started back to the queue, without
// counting the attempt.
func (b *DB) release(ctx context.Context, rows []*jobs.JobRow) error {
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int64, len(rows))
	attempts := make([]int32, len(rows))
	b.mu.Lock()
	for i, r := range rows {
		ids[i], attempts[i] = int64(r.ID), int32(r.Attempt)
		b.dropLocked(r.ID)
	}
	b.mu.Unlock()
	_, err := b.pool.Exec(ctx, sqlRelease, pgx.QueryExecModeExec, ids, attempts)
	if err == nil && !b.isClosed() {
		signal(b.wake)
	}
	return err
}

// mayHaveCommitted reports whether a statement that failed with err may
// still have committed: the server neither refused it (a PgError rolls
// the statement's transaction back) nor was it certainly never sent (no
// connection, or pgx says so).
func mayHaveCommitted(err error) bool {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	return !errors.As(err, &pe) && !errors.As(err, &ce) && !pgconn.SafeToRetry(err)
}

// releaseLost hands back the jobs of the claims whose answer was lost (a
// crash of the server, or of the connection, after the claim committed
// and before its rows arrived): they are 'running' in the table, claimed
// by this process, and no worker of it will ever run them, so they would
// sit there until rescued after RescueAfter. The claim's time, which it
// stored as the jobs' attempted_at, tells them from the jobs of other
// claims; the jobs this process holds are left alone anyway (a stopped
// test clock gives every claim the same time). It is idempotent: jobs
// already handed back are 'available'. Only the fetcher calls it, with no
// claim in flight (or Close, once the fetcher stopped).
func (b *DB) releaseLost(ctx context.Context) error {
	if len(b.lostClaims) == 0 {
		return nil
	}
	b.mu.Lock()
	held := make([]int64, 0, len(b.running))
	for id := range b.running {
		held = append(held, int64(id))
	}
	b.mu.Unlock()
	b.cmu.Lock()
	for _, d := range [][]doneRec{b.done, b.written} {
		for _, r := range d {
			held = append(held, r.id)
		}
	}
	b.cmu.Unlock()
	tag, err := b.pool.Exec(ctx, sqlReleaseLost, pgx.QueryExecModeExec, b.claimedBy, b.lostClaims, held)
	if err != nil {
		return fmt.Errorf("pgjobs: hand back the jobs of %d claims whose answer was lost on %s: %w", len(b.lostClaims), b.name, err)
	}
	if n := tag.RowsAffected(); n > 0 {
		b.log.Warn("pgjobs: handed back jobs of a claim whose answer the connection lost; they run once, later",
			"jobs", n, "claims", len(b.lostClaims))
		signal(b.wake)
	}
	b.lostClaims = b.lostClaims[:0]
	return nil
}

// sqlReleaseLost is sqlRelease for the jobs of lost claims: claimed by
// $1 at one of the times $2, not held by this process ($3).
const sqlReleaseLost = `
UPDATE cellgate_jobs
SET state = 'available', attempt = attempt - 1, attempted_at = NULL, heartbeat_at = NULL
WHERE state = 'running' AND claimed_by = $1 AND attempted_at = ANY ($2::timestamptz[])
  AND id <> ALL ($3::bigint[])`

const sqlRelease = `
UPDATE cellgate_jobs
SET state = 'available', attempt = attempt - 1, attempted_at = NULL, heartbeat_at = NULL
WHERE id = ANY ($1::bigint[]) AND state = 'running'
  AND attempt = ($2::int[])[array_position($1::bigint[], id)]`

// wakeAt makes the fetcher look for work at t (a job scheduled by this
// process becomes due). Times are kept in a heap so each scheduled job gets
// its own wake-up; the poll interval covers those of other processes.
func (b *DB) wakeAt(t time.Time) {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	if b.isClosed() {
		return
	}
	heap.Push(&b.wakeAts, t)
	b.armLocked()
}

// armLocked points the timer at the earliest pending wake-up. b.tmu must be
// held.
func (b *DB) armLocked() {
	if len(b.wakeAts) == 0 {
		return
	}
	next := b.wakeAts[0]
	if b.timer != nil && !next.Before(b.timerAt) {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerAt = next
	b.timer = b.clock.AfterFunc(next.Sub(b.clock.Now()), b.fireWake)
}

func (b *DB) fireWake() {
	b.tmu.Lock()
	now := b.clock.Now()
	b.timer = nil
	for len(b.wakeAts) > 0 && !b.wakeAts[0].After(now) {
		heap.Pop(&b.wakeAts)
	}
	if !b.isClosed() {
		b.armLocked()
	}
	b.tmu.Unlock()
	signal(b.wake)
}
