package pgjobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellgate/cellgate/internal/jobs"
)

// MaintenanceReport is what one pass of the maintenance connection did.
type MaintenanceReport struct {
	// Leader is whether this backend held the table's maintenance lock.
	Leader bool
	// Heartbeats is the number of running jobs whose heartbeat was sent.
	Heartbeats int
	// Rescued is the number of stuck jobs made available again.
	Rescued int
	// RescuedFailed is the number of stuck jobs failed because they had used
	// their last attempt.
	RescuedFailed int
	// Placed is the number of held jobs of capped tenants the pass placed
	// in the fair order (see sqlRefillHeld).
	Placed int
	// Deleted is the number of finished jobs deleted by retention.
	Deleted int
	// Vacuumed is whether the pass vacuumed the table (Config.VacuumDeadRows).
	Vacuumed bool
	// PeriodicEnqueued and PeriodicSkipped count the periods of periodic
	// jobs the pass enqueued and skipped (the control database's leader).
	PeriodicEnqueued, PeriodicSkipped int
	// CancelsSeen is the number of running jobs of this process whose
	// cancellation the heartbeat found (a NOTIFY missed).
	CancelsSeen int
	// Err is the first error of the pass, if any.
	Err error
}

// RunMaintenance runs one pass of the maintenance loop now (heartbeats;
// then, if this backend is or becomes the leader, rescue and retention) and
// reports it. The loop runs passes on its own every RescueAfter/4; tests
// call this instead of waiting.
func (b *DB) RunMaintenance(ctx context.Context) (MaintenanceReport, error) {
	if err := b.usable(); err != nil {
		return MaintenanceReport{}, err
	}
	ch := make(chan MaintenanceReport, 1)
	b.mmu.Lock()
	b.mreqs = append(b.mreqs, ch)
	if b.waitCancel != nil {
		b.waitCancel()
	}
	b.mmu.Unlock()
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		return MaintenanceReport{}, ctx.Err()
	case <-b.quit:
		return MaintenanceReport{}, errors.New("pgjobs: closed before the maintenance pass ran")
	}
}

// connLoop owns the backend's dedicated connection: LISTEN for new jobs,
// heartbeats, and, while it holds the table's advisory lock, maintenance.
// A lost connection drops the lock (PostgreSQL releases it), so another
// process takes over; this loop reconnects with backoff.
func (b *DB) connLoop() {
	defer b.wg.Done()
	select {
	case <-b.ready:
	case <-b.quit:
		return
	}
	retry := newBackoff(100*time.Millisecond, 5*time.Second)
	for !b.isClosed() {
		conn, err := b.connect()
		if err == nil {
			retry.reset()
			err = b.serveConn(conn)
			b.leader.Store(false)
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		if b.isClosed() {
			return
		}
		if err != nil {
			b.logErr("conn", "pgjobs: maintenance/LISTEN connection failed; reconnecting", err)
		}
		if !retry.wait(b.quit) {
			return
		}
	}
}

func (b *DB) connect() (*pgx.Conn, error) {
	cc := b.pool.Config().ConnConfig.Copy()
	// Plan every statement afresh: the table's size swings too much for a
	// plan cached on this long-lived connection to stay good.
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		if n.Channel == cancelChannel {
			if id, ours := parseCancel(n.Payload, b.tableOID.Load()); ours {
				b.noteCancel(id)
			}
			return
		}
		b.heard(n.Payload)
		signal(b.wake)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cc)
}

func (b *DB) serveConn(conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	// The table's oid before the first cancellation can be heard.
	var oid uint32
	err := conn.QueryRow(ctx, sqlTableOID).Scan(&oid)
	if err == nil {
		b.tableOID.Store(oid)
		_, err = conn.Exec(ctx, "LISTEN cellgate_jobs")
	}
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN "+cancelChannel)
	}
	cancel()
	if err != nil {
		return err
	}
	// Jobs may have arrived while no one listened.
	signal(b.wake)
	tick := b.cfg.tick()
	next := time.Now()
	nextVacuum := time.Now().Add(b.cfg.VacuumEvery)
	var lastRetention time.Time
	// The periodic schedule runs when this connection's process leads
	// and an entry comes due (clock time), or on RunMaintenance.
	var nextPeriodic, armedPeriodic time.Time
	var periodicTimer jobs.Timer
	defer func() {
		if periodicTimer != nil {
			periodicTimer.Stop()
		}
	}()
	for {
		b.mmu.Lock()
		reqs := b.mreqs
		b.mreqs = nil
		kicked := b.periodicKick
		b.periodicKick = false
		b.mmu.Unlock()
		now := time.Now()
		var passRep MaintenanceReport
		if len(reqs) > 0 || !now.Before(next) || !now.Before(nextVacuum) {
			full := len(reqs) > 0 || !now.Before(next)
			retention := len(reqs) > 0 || now.Sub(lastRetention) >= b.cfg.RetentionEvery
			vacuum := len(reqs) > 0 || !now.Before(nextVacuum)
			rep := b.pass(conn, full, full && retention, vacuum)
			if full && retention && rep.Leader && rep.Err == nil {
				lastRetention = time.Now()
			}
			passRep = rep
			if full {
				next = time.Now().Add(tick)
			}
			if vacuum {
				nextVacuum = time.Now().Add(b.cfg.VacuumEvery)
			}
			if rep.Err != nil && conn.IsClosed() {
				answer(reqs, passRep)
				return rep.Err
			}
		}
		if len(b.periodic) > 0 && b.leader.Load() && (len(reqs) > 0 || kicked || !b.now().Before(nextPeriodic)) {
			var enq, skip int
			var err error
			nextPeriodic, enq, skip, err = b.schedulePeriodic()
			if err != nil {
				b.logErr("periodic", "pgjobs: scheduling periodic jobs failed; trying again", err)
			}
			passRep.PeriodicEnqueued, passRep.PeriodicSkipped = enq, skip
			if passRep.Err == nil {
				passRep.Err = err
			}
			if err != nil && conn.IsClosed() {
				answer(reqs, passRep)
				return err
			}
		}
		answer(reqs, passRep)
		wakeAt := next
		if nextVacuum.Before(wakeAt) {
			wakeAt = nextVacuum
		}
		if len(b.periodic) > 0 && b.leader.Load() && !nextPeriodic.Equal(armedPeriodic) {
			// On the injected clock, so a test's clock moves the schedule.
			if periodicTimer != nil {
				periodicTimer.Stop()
			}
			armedPeriodic = nextPeriodic
			periodicTimer = b.clock.AfterFunc(max(nextPeriodic.Sub(b.now()), 0), b.kickPeriodic)
		}
		wctx, wcancel := context.WithDeadline(context.Background(), wakeAt)
		b.mmu.Lock()
		if b.isClosed() {
			b.mmu.Unlock()
			wcancel()
			return nil
		}
		b.waitCancel = wcancel
		pending := len(b.mreqs) > 0 || b.periodicKick
		b.mmu.Unlock()
		if pending {
			wcancel()
		}
		err := conn.PgConn().WaitForNotification(wctx)
		timedOut := wctx.Err() != nil
		wcancel()
		b.mmu.Lock()
		b.waitCancel = nil
		b.mmu.Unlock()
		if b.isClosed() {
			return nil
		}
		switch {
		case err == nil:
			signal(b.wake) // OnNotification has signalled too; harmless
		case timedOut && !conn.IsClosed():
			// A tick, or RunMaintenance.
		default:
			return err
		}
	}
}

// kickPeriodic wakes the maintenance connection's loop for the periodic
// schedule (a timer on the injected clock).
func (b *DB) kickPeriodic() {
	b.mmu.Lock()
	b.periodicKick = true
	if b.waitCancel != nil {
		b.waitCancel()
	}
	b.mmu.Unlock()
}

// answer hands a pass's report to the RunMaintenance calls waiting for it.
func answer(reqs []chan MaintenanceReport, rep MaintenanceReport) {
	for _, ch := range reqs {
		ch <- rep
	}
}

// maintenanceLockClass is the first key of the table's advisory lock; the
// second is the table's oid, so each jobs table (one per database, or per
// schema in tests) has one leader.
const maintenanceLockClass = 1667723882

// pass runs one maintenance pass on conn: with full, heartbeats, leader
// election and rescue (and retention, with retention); with vacuum, the
// leader's vacuum check.
func (b *DB) pass(conn *pgx.Conn, full, retention, vacuum bool) (rep MaintenanceReport) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	now := b.now()
	setErr := func(err error) {
		if rep.Err == nil && err != nil {
			rep.Err = err
		}
	}
	if !full {
		rep.Leader = b.leader.Load()
		if rep.Leader && vacuum {
			rep.Vacuumed, rep.Err = b.vacuum(ctx, conn)
		}
		return rep
	}

	b.mu.Lock()
	ids := make([]int64, 0, len(b.running))
	attempts := make([]int32, 0, len(b.running))
	for id, h := range b.running {
		ids = append(ids, int64(id))
		attempts = append(attempts, h.attempt)
	}
	b.mu.Unlock()
	if len(ids) > 0 {
		var cancelled []int64
		err := conn.QueryRow(ctx, sqlHeartbeat, ids, attempts, now).Scan(&rep.Heartbeats, &cancelled)
		setErr(err)
		// The poll behind NOTIFY cellgate_jobs_cancel: a cancellation
		// whose notification was lost reaches the job within a tick.
		for _, id := range cancelled {
			b.noteCancel(jobs.JobID(id))
		}
		rep.CancelsSeen = len(cancelled)
	}

	if !b.leader.Load() {
		var got bool
		if err := conn.QueryRow(ctx, sqlTryLead, maintenanceLockClass).Scan(&got); err != nil {
			setErr(fmt.Errorf("pgjobs: leader election on %s: %w", b.name, err))
			return rep
		}
		if got {
			b.leader.Store(true)
			b.log.Info("pgjobs: this process now runs the maintenance of the jobs table")
		}
	}
	rep.Leader = b.leader.Load()
	if !rep.Leader {
		return rep
	}

	rows, err := conn.Query(ctx, sqlRescue, now, now.Add(-b.cfg.RescueAfter))
	if err != nil {
		setErr(fmt.Errorf("pgjobs: rescue on %s: %w", b.name, err))
		return rep
	}
	for rows.Next() {
		var failed bool
		if err := rows.Scan(&failed); err != nil {
			setErr(err)
			break
		}
		if failed {
			rep.RescuedFailed++
		} else {
			rep.Rescued++
		}
	}
	rows.Close()
	setErr(rows.Err())
	if rep.Rescued+rep.RescuedFailed > 0 {
		b.log.Warn("pgjobs: rescued jobs whose process stopped sending heartbeats",
			"available_again", rep.Rescued, "failed", rep.RescuedFailed, "rescue_after", b.cfg.RescueAfter)
	}
	if rep.Rescued > 0 {
		// An autocommit statement of its own: see notify.go. It names no
		// tenant: rescued jobs have no place, and the fair claim that
		// makes them ready names their tenants.
		_, err := conn.Exec(ctx, sqlNotify, "[]")
		setErr(err)
		signal(b.wake)
	}

	if err := conn.QueryRow(ctx, sqlRefillHeld, now).Scan(&rep.Placed); err != nil {
		setErr(fmt.Errorf("pgjobs: placing held jobs on %s: %w", b.name, err))
	} else if rep.Placed > 0 {
		// Held jobs were ready for fair claims already: no tenant named.
		_, err := conn.Exec(ctx, sqlNotify, "[]")
		setErr(err)
		signal(b.wake)
	}

	if vacuum {
		var err error
		rep.Vacuumed, err = b.vacuum(ctx, conn)
		setErr(err)
	}

	if retention {
		// The cancellation requests of jobs that ended (a handful).
		if _, err := conn.Exec(ctx, sqlCancelRequestsDone); err != nil {
			setErr(fmt.Errorf("pgjobs: cancellation requests on %s: %w", b.name, err))
		}
		cutoff := now.Add(-b.cfg.Retention)
		for range maxRetentionChunks {
			tag, err := conn.Exec(ctx, sqlRetention, cutoff, retentionChunk)
			if err != nil {
				setErr(fmt.Errorf("pgjobs: retention on %s: %w", b.name, err))
				break
			}
			rep.Deleted += int(tag.RowsAffected())
			if tag.RowsAffected() < retentionChunk {
				break
			}
		}
	}
	return rep
}

// vacuum runs VACUUM on the table when it holds more than VacuumDeadRows
// dead rows. A queue table turns every job into several dead row versions,
// and until they are vacuumed each claim steps over the dead index entries
// at the head of the claim indexes, so claims slow down as jobs go through;
// autovacuum visits a table at most once per autovacuum_naptime (a minute by
// default), and may be off.
func (b *DB) vacuum(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var dead int64
	if err := conn.QueryRow(ctx, sqlDeadRows).Scan(&dead); err != nil {
		return false, fmt.Errorf("pgjobs: dead rows of %s: %w", b.name, err)
	}
	if dead < int64(b.cfg.VacuumDeadRows) {
		return false, nil
	}
	// ANALYZE too, now and then: with autovacuum off nothing else keeps the
	// planner's statistics of the table current, but they need no refresh
	// at every vacuum (the claim functions' plans are pinned). TRUNCATE
	// false: handing the table's empty tail back to the OS takes a lock
	// that stops claims and enqueues for a moment, and a queue table soon
	// needs the space again.
	analyze := time.Since(b.lastAnalyze) >= analyzeEvery
	stmt := "VACUUM (TRUNCATE false) cellgate_jobs"
	if analyze {
		stmt = "VACUUM (TRUNCATE false, ANALYZE) cellgate_jobs"
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return false, fmt.Errorf("pgjobs: vacuum %s: %w", b.name, err)
	}
	if analyze {
		b.lastAnalyze = time.Now()
	}
	return true, nil
}

// analyzeEvery is the least time between two ANALYZEs by the vacuum check.
const analyzeEvery = time.Minute

const sqlDeadRows = `
SELECT coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'cellgate_jobs'::regclass), 0)`

// Retention deletes in chunks so one pass never holds a huge transaction;
// a backlog larger than one pass's share is finished by the next passes.
const (
	retentionChunk     = 5000
	maxRetentionChunks = 20
)

const sqlTryLead = `SELECT pg_try_advisory_lock($1, (` + sqlJobsTableOID + `::bigint & 2147483647)::int)`

// sqlJobsTableOID is, in SQL, the oid of the jobs table a statement's
// search path finds, which every statement of the backend reads and
// writes: the advisory locks and the cancellations name the table by it,
// so that the jobs tables of a database's schemas keep apart.
const sqlJobsTableOID = `('cellgate_jobs'::regclass)::oid`

const sqlHeartbeat = `
WITH h AS (
    UPDATE cellgate_jobs
    SET heartbeat_at = $3
    WHERE id = ANY ($1::bigint[]) AND state = 'running'
      AND attempt = ($2::int[])[array_position($1::bigint[], id)]
    RETURNING id)
SELECT count(*)::int,
       coalesce(array_agg(h.id) FILTER (WHERE EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = h.id)), '{}')
FROM h`

// sqlRefillHeld places the held jobs of every tenant that has room for
// them (cellgate_jobs_refill). Claims refill the tenants whose jobs they
// take; this covers a tenant whose placed jobs went another way (cancelled,
// deleted) or whose cap changed while it had nothing placed. The tenants
// with held jobs are found by a skip scan of cellgate_jobs_held_idx: one
// descent per tenant, not one per held job.
const sqlRefillHeld = `
WITH RECURSIVE t AS (
    (SELECT tenant FROM cellgate_jobs WHERE state = 'available' AND held ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant FROM cellgate_jobs j
            WHERE j.state = 'available' AND j.held AND j.tenant > t.tenant
            ORDER BY j.tenant LIMIT 1)
    FROM t WHERE t.tenant IS NOT NULL)
SELECT cellgate_jobs_refill(ARRAY(SELECT tenant FROM t WHERE tenant IS NOT NULL), NULL, $1)`

// sqlRescue makes jobs whose heartbeat is older than $2 available again at
// once, or fails them if that was their last attempt; the attempt stays
// counted, so a job that keeps killing its process stops eventually.
const sqlRescue = `
UPDATE cellgate_jobs
SET state = CASE WHEN attempt >= max_attempts OR EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN attempt >= max_attempts OR EXISTS (SELECT FROM cellgate_jobs_cancel_requests c WHERE c.job_id = cellgate_jobs.id) THEN $1::timestamptz END,
    run_at = $1,
    vtime = NULL,
    heartbeat_at = NULL,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'at', $1::timestamptz,
        'error', 'rescued: the process running it (' || coalesce(claimed_by, '?') || ') stopped sending heartbeats'))
WHERE state = 'running' AND attempt > 0 AND heartbeat_at < $2
RETURNING state = 'failed'`

const sqlCancelRequestsDone = `
DELETE FROM cellgate_jobs_cancel_requests c
WHERE NOT EXISTS (SELECT FROM cellgate_jobs j WHERE j.id = c.job_id AND j.state = 'running')`

// sqlRetention deletes the oldest expired jobs. It walks the primary key
// from the oldest id: finished jobs are the old ones, so the walk stops
// after about $2 rows without an index on finished_at (which every
// completion would have to maintain).
const sqlRetention = `
DELETE FROM cellgate_jobs
WHERE id = ANY (ARRAY(SELECT id FROM cellgate_jobs
                      WHERE state IN ('completed', 'failed') AND finished_at < $1
                      ORDER BY id
                      LIMIT $2))`
