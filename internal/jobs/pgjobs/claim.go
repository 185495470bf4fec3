package pgjobs

import (
	"container/heap"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/jobs"
)

// dbTimeout bounds the backend's own statements (claims, flushes,
// maintenance), which run on no caller's context.
const dbTimeout = 30 * time.Second

// Claim blocks until the fetcher hands worker a job; see jobs.Backend. One
// goroutine per worker index may call it at a time.
func (b *Backend) Claim(ctx context.Context, worker int) (*jobs.JobRow, error) {
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
func (b *Backend) dequeue(w *waiter) {
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
func (b *Backend) handOffLocked(row *jobs.JobRow) {
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
// jobs it claimed, and whether a fair claim stopped early with more tenants
// to look at.
func (b *Backend) claimBatch(n int, mark flightMark) (int, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	done := b.takeDone()
	ids, attempts := splitDone(done)
	now := b.now()
	b.mu.Lock()
	var cursor *string
	if b.fair && b.hasCursor {
		c := b.cursor
		cursor = &c
	}
	quantum := b.quantumLocked(n)
	b.mu.Unlock()
	rows, err := b.pool.Query(ctx, sqlClaim, now, n, b.fair, cursor, b.capKinds, b.caps, b.cfg.CapLookahead, b.claimedBy, ids, attempts, int32(quantum))
	var rowsOut []*jobs.JobRow
	var hint *string
	if err == nil {
		rowsOut, hint, err = b.readClaim(rows)
	}
	if err != nil {
		// The statement's transaction rolled back: the completions are
		// still to be written, and no job was claimed.
		b.putBackDone(done)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.landedLocked(n, mark)
	if err != nil {
		return 0, false, fmt.Errorf("pgjobs: claim on %s: %w", b.name, err)
	}
	if len(rowsOut) == 0 {
		if hint != nil {
			b.cursor, b.hasCursor = *hint, true
			return 0, true, nil
		}
		return 0, false, nil
	}
	if b.fair {
		b.ring = b.ringAfter(rowsOut, n, quantum, cursor)
		b.cursor, b.hasCursor = rowsOut[len(rowsOut)-1].Tenant, true
		if hint != nil {
			// Where the walk ended when some of the jobs it found went to
			// another claimer: go on from there, and look again at once
			// (the claim came back short without the ring being done).
			b.cursor, b.ring = *hint, 0
		}
	}
	for _, r := range rowsOut {
		b.running[r.ID] = int32(r.Attempt)
		b.handOffLocked(r)
	}
	return len(rowsOut), hint != nil, nil
}

// quantumLocked is the fair claim's quantum for a claim of n jobs: the
// configured one, or, while the ring of tenants with ready jobs is shorter
// than the batch, an equal share of the batch for each of them, so the walk
// takes each tenant's share in its one descent. b.mu must be held.
func (b *Backend) quantumLocked(n int) int {
	q := b.cfg.FairQuantum
	if b.ring > 0 {
		q = max(q, (n+b.ring-1)/b.ring)
	}
	return q
}

// ringAfter returns the length of the ring of tenants with ready jobs, as
// far as a fair claim of n jobs with quantum q from cursor that returned
// rows shows it, or 0 when the ring may be longer than the batch.
//
// The claim saw the whole ring when it came back short, or gave a tenant
// more than q jobs (an equal share). A claim with a quantum raised for a
// short ring (q above the configured one) saw it whole if it went round
// past its cursor; if it did not, tenants have joined, and the configured
// quantum walks the ring again. With per-kind caps a claim also comes back
// short when it trims jobs of kinds at their cap, so the ring is not
// estimated.
func (b *Backend) ringAfter(rows []*jobs.JobRow, n, q int, cursor *string) int {
	if len(b.capKinds) > 0 {
		return 0
	}
	per := make(map[string]int, len(rows))
	most, wrapped := 0, false
	for _, r := range rows {
		per[r.Tenant]++
		most = max(most, per[r.Tenant])
		wrapped = wrapped || (cursor != nil && r.Tenant <= *cursor)
	}
	switch {
	case len(rows) < n || most > q:
		return len(per)
	case q > b.cfg.FairQuantum && wrapped:
		return len(per)
	default:
		return 0
	}
}

func (b *Backend) readClaim(rows pgx.Rows) ([]*jobs.JobRow, *string, error) {
	defer rows.Close()
	type ordered struct {
		row *jobs.JobRow
		ord int32
	}
	var out []ordered
	var hint *string
	for rows.Next() {
		r := &jobs.JobRow{Handle: b}
		var id int64
		var attempt, maxAttempts, ord int32
		if err := rows.Scan(&id, &r.Kind, &r.Queue, &r.Tenant, &r.EncodedArgs, &attempt, &maxAttempts, &r.EnqueuedAt, &ord); err != nil {
			return nil, nil, err
		}
		if id == 0 { // a cursor hint, not a job
			t := r.Tenant
			hint = &t
			continue
		}
		r.ID, r.Attempt, r.MaxAttempts = jobs.JobID(id), int(attempt), int(maxAttempts)
		out = append(out, ordered{r, ord})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ord < out[j].ord })
	res := make([]*jobs.JobRow, len(out))
	for i := range out {
		res[i] = out[i].row
	}
	return res, hint, nil
}

const sqlClaim = `
SELECT job_id, job_kind, job_queue, job_tenant, job_args, job_attempt, job_max_attempts, job_created_at, job_ord
FROM cellgate_jobs_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// release hands claimed jobs that never started back to the queue, without
// counting the attempt.
func (b *Backend) release(ctx context.Context, rows []*jobs.JobRow) error {
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int64, len(rows))
	attempts := make([]int32, len(rows))
	b.mu.Lock()
	for i, r := range rows {
		ids[i], attempts[i] = int64(r.ID), int32(r.Attempt)
		delete(b.running, r.ID)
	}
	b.mu.Unlock()
	_, err := b.pool.Exec(ctx, sqlRelease, pgx.QueryExecModeExec, ids, attempts)
	if err == nil && !b.isClosed() {
		signal(b.wake)
	}
	return err
}

const sqlRelease = `
UPDATE cellgate_jobs
SET state = 'available', attempt = attempt - 1, attempted_at = NULL, heartbeat_at = NULL
WHERE id = ANY ($1::bigint[]) AND state = 'running'
  AND attempt = ($2::int[])[array_position($1::bigint[], id)]`

// wakeAt makes the fetcher look for work at t (a job scheduled by this
// process becomes due). Times are kept in a heap so each scheduled job gets
// its own wake-up; the poll interval covers those of other processes.
func (b *Backend) wakeAt(t time.Time) {
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
func (b *Backend) armLocked() {
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

func (b *Backend) fireWake() {
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
