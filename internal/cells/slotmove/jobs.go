package slotmove

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cellgate/cellgate/internal/slots"
)

// The shard-local jobs (jobs.postgres.shard_local): the job backend keeps a
// cellgate_jobs table on every shard, and a tenant's transactional jobs sit
// on its shard. After the switch the moved tenants' waiting and scheduled
// jobs (state 'available', run_at now or later) move with them, verified
// like the rows: count and checksum of their content on both sides before
// the source rows are deleted.
//
// Running jobs are not moved: they finish at the source cell, whose
// workers claimed them. While the range is fenced their writes to the
// moved tables fail, so such a job fails its attempt and, with attempts
// left, becomes waiting again at the source, where this step (run again,
// it resumes at the delete) picks it up. A job still running when the move
// ends stays at the source for good; the Report counts those
// (JobsLeftRunning) and the log names them.
//
// The columns below are those of internal/jobs/pgjobs/migrations since
// 000005 (priority came with 000004, trace_context with 000005); the step
// refuses databases whose jobs schemas differ.

const (
	jobsTable          = "cellgate_jobs"
	jobsMigrationTable = "cellgate_jobs_schema_migrations"
	// jobCols is a job's content: what is copied and checksummed. A moved
	// job starts over in the target's fair order (vtime NULL) and keeps its
	// attempts, errors, times, priority and the trace context of the request
	// that enqueued it.
	jobCols = "kind, queue, tenant, args, attempt, max_attempts, run_at, unique_key, errors, created_at, priority, trace_context"
	// markerPrefix: a moved job's claimed_by on the target names its source
	// row ("slotmove shard-0 42"), so a move run again after a crash
	// between the target's commit and the source's delete does not copy
	// it twice.
	markerPrefix = "slotmove "
)

// moveJobs moves the range's waiting and scheduled jobs from each source
// shard that has a jobs table to the tenant's target shard.
func (mv *mover) moveJobs(ctx context.Context, rep *Report) error {
	for _, src := range mv.source {
		ok, err := hasJobs(ctx, src.conn)
		if err != nil {
			return fmt.Errorf("slotmove: jobs on source %s: %w", src.name, err)
		}
		if !ok {
			continue
		}
		byTarget, tenants, err := mv.jobTenants(ctx, src)
		if err != nil {
			return err
		}
		for d, ts := range byTarget {
			if err := mv.moveJobsTo(ctx, src, mv.target[d], ts, rep); err != nil {
				return err
			}
		}
		if len(tenants) > 0 {
			var running int64
			if err := src.conn.QueryRow(ctx, "SELECT count(*) FROM "+jobsTable+" WHERE state = 'running' AND tenant = ANY($1)", tenants).Scan(&running); err != nil {
				return fmt.Errorf("slotmove: jobs on source %s: %w", src.name, err)
			}
			if running > 0 {
				rep.JobsLeftRunning += running
				mv.log.Warn("running jobs of moved tenants stay at the source; they finish there", "shard", src.name, "jobs", running)
			}
		}
	}
	if err := mv.moveControlJobs(ctx, rep); err != nil {
		return err
	}
	if rep.JobsMoved > 0 || rep.JobsDuplicate > 0 {
		mv.log.Info("jobs moved", "jobs", rep.JobsMoved, "duplicates_dropped", rep.JobsDuplicate, "left_running", rep.JobsLeftRunning)
	}
	return nil
}

// hasJobs reports whether the database has the job backend's table.
func hasJobs(ctx context.Context, c *pgx.Conn) (bool, error) {
	var ok bool
	err := c.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", jobsTable).Scan(&ok)
	return ok, err
}

// jobTenants finds the tenants of the range with jobs (waiting, scheduled
// or running) at src, grouped by their target shard for the waiting ones.
// The slot of a tenant is computed here: the jobs table has no slot column.
func (mv *mover) jobTenants(ctx context.Context, src *shardConn) (map[int][]string, []string, error) {
	rows, err := src.conn.Query(ctx, "SELECT DISTINCT tenant FROM "+jobsTable+" WHERE state IN ('available', 'running') AND tenant <> ''")
	if err != nil {
		return nil, nil, fmt.Errorf("slotmove: jobs on source %s: %w", src.name, err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("slotmove: jobs on source %s: %w", src.name, err)
	}
	byTarget := map[int][]string{}
	var in []string
	for _, t := range all {
		s, err := slots.Slot(t)
		if err != nil || !mv.cfg.Range.Contains(s) {
			continue
		}
		in = append(in, t)
		d := mv.dstMap.Owner(s)
		byTarget[d] = append(byTarget[d], t)
	}
	return byTarget, in, nil
}

// jobRow is one job as it moves.
type jobRow struct {
	id                   int64
	kind, queue, tenant  string
	args, errs           string // jsonb as text
	attempt, maxAttempts int32
	runAt, createdAt     any
	uniqueKey            *string
	priority             int16
	traceContext         *string // jsonb as text
}

// moveJobsTo moves the waiting jobs of tenants from src to dst: lock them
// at the source (a claim waits, then skips them), copy them into the
// target, drop those the target already holds (moved by an earlier run,
// or an active job with the same uniqueness key), verify, commit the
// target, then delete at the source and commit. A crash between the two
// commits leaves jobs on both sides; the next run sees the target's copies
// by their marker and only deletes the source rows.
func (mv *mover) moveJobsTo(ctx context.Context, src, dst *shardConn, tenants []string, rep *Report) error {
	ok, err := hasJobs(ctx, dst.conn)
	if err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	stx, err := src.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("slotmove: jobs on source %s: %w", src.name, err)
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := stx.Query(ctx, `SELECT id, kind, queue, tenant, args::text, attempt, max_attempts, run_at, unique_key, errors::text, created_at,
		priority, trace_context::text
		FROM `+jobsTable+` WHERE state = 'available' AND tenant = ANY($1) ORDER BY id FOR UPDATE`, tenants)
	if err != nil {
		return fmt.Errorf("slotmove: lock jobs on source %s: %w", src.name, err)
	}
	var jobs []jobRow
	for rows.Next() {
		var j jobRow
		if err := rows.Scan(&j.id, &j.kind, &j.queue, &j.tenant, &j.args, &j.attempt, &j.maxAttempts, &j.runAt, &j.uniqueKey, &j.errs, &j.createdAt,
			&j.priority, &j.traceContext); err != nil {
			rows.Close()
			return fmt.Errorf("slotmove: read jobs on source %s: %w", src.name, err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("slotmove: read jobs on source %s: %w", src.name, err)
	}
	if len(jobs) == 0 {
		return nil
	}
	if !ok {
		return fmt.Errorf("slotmove: %d waiting jobs of the moved tenants are on source %s, but target %s has no %s table; migrate the target cell with jobs.postgres.shard_local first",
			len(jobs), src.name, dst.name, jobsTable)
	}
	if err := sameJobsSchema(ctx, src, dst); err != nil {
		return err
	}

	dtx, err := dst.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := dtx.Exec(ctx, `CREATE TEMP TABLE cellgate_move_jobs (src_id bigint, marker text, kind text, queue text, tenant text, args jsonb,
		attempt integer, max_attempts integer, run_at timestamptz, unique_key text, errors jsonb, created_at timestamptz,
		priority smallint, trace_context jsonb, present boolean NOT NULL DEFAULT false, duplicate boolean NOT NULL DEFAULT false) ON COMMIT DROP`); err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	marker := markerPrefix + src.name + " "
	_, err = dtx.CopyFrom(ctx, pgx.Identifier{"cellgate_move_jobs"},
		[]string{"src_id", "marker", "kind", "queue", "tenant", "args", "attempt", "max_attempts", "run_at", "unique_key", "errors", "created_at",
			"priority", "trace_context"},
		pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
			j := jobs[i]
			return []any{j.id, fmt.Sprint(marker, j.id), j.kind, j.queue, j.tenant, j.args, j.attempt, j.maxAttempts, j.runAt, j.uniqueKey, j.errs, j.createdAt,
				j.priority, j.traceContext}, nil
		}))
	if err != nil {
		return fmt.Errorf("slotmove: copy jobs to target %s: %w", dst.name, err)
	}
	// Already moved by an earlier run: keep them for the checksum, do not
	// insert them again.
	if _, err := dtx.Exec(ctx, `UPDATE cellgate_move_jobs m SET present = true FROM `+jobsTable+` j WHERE j.claimed_by = m.marker`); err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	// An active job with the same uniqueness key on the target (the tenant
	// enqueued it there after the switch) is the same job: drop the
	// source's.
	dupRows, err := dtx.Query(ctx, `UPDATE cellgate_move_jobs m SET duplicate = true WHERE NOT present AND unique_key IS NOT NULL AND EXISTS (
		SELECT 1 FROM `+jobsTable+` j WHERE j.kind = m.kind AND j.tenant = m.tenant AND j.unique_key = m.unique_key AND j.state IN ('available', 'running'))
		RETURNING src_id`)
	if err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	dups, err := pgx.CollectRows(dupRows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	tag, err := dtx.Exec(ctx, `INSERT INTO `+jobsTable+` (`+jobCols+`, state, claimed_by)
		SELECT `+jobCols+`, 'available', marker FROM cellgate_move_jobs WHERE NOT present AND NOT duplicate ORDER BY src_id`)
	if err != nil {
		return fmt.Errorf("slotmove: insert jobs on target %s: %w", dst.name, err)
	}

	// Verify: the jobs now on the target (this run's and an earlier run's)
	// against the locked source rows, duplicates left out on both sides.
	isDup := make(map[int64]bool, len(dups))
	for _, id := range dups {
		isDup[id] = true
	}
	var ids []int64
	var markers []string
	for _, j := range jobs {
		if !isDup[j.id] {
			ids = append(ids, j.id)
			markers = append(markers, fmt.Sprint(marker, j.id))
		}
	}
	sum := `SELECT count(*), coalesce(sum(hashtextextended(ROW(` + jobCols + `)::text, 0)), 0)::text FROM ` + jobsTable
	var sn, tn int64
	var ssum, tsum string
	if err := stx.QueryRow(ctx, sum+" WHERE id = ANY($1)", ids).Scan(&sn, &ssum); err != nil {
		return fmt.Errorf("slotmove: verify jobs on source %s: %w", src.name, err)
	}
	if err := dtx.QueryRow(ctx, sum+" WHERE claimed_by = ANY($1)", markers).Scan(&tn, &tsum); err != nil {
		return fmt.Errorf("slotmove: verify jobs on target %s: %w", dst.name, err)
	}
	if sn != tn || ssum != tsum {
		return &VerifyError{Table: jobsTable, Range: mv.cfg.Range, SourceRows: sn, TargetRows: tn, SourceSum: ssum, TargetSum: tsum}
	}
	if err := dtx.Commit(ctx); err != nil {
		return fmt.Errorf("slotmove: jobs on target %s: %w", dst.name, err)
	}
	all := make([]int64, len(jobs))
	for i, j := range jobs {
		all[i] = j.id
	}
	if _, err := stx.Exec(ctx, "DELETE FROM "+jobsTable+" WHERE id = ANY($1)", all); err != nil {
		return fmt.Errorf("slotmove: delete jobs on source %s: %w", src.name, err)
	}
	if err := stx.Commit(ctx); err != nil {
		return fmt.Errorf("slotmove: delete jobs on source %s (they are on target %s already; run the move again to delete them): %w", src.name, dst.name, err)
	}
	rep.JobsMoved += tag.RowsAffected()
	rep.JobsDuplicate += int64(len(dups))
	rep.Verified[jobsTable] += sn
	return nil
}

// sameJobsSchema refuses to move jobs between databases whose job backend
// schemas are at different versions (or dirty).
func sameJobsSchema(ctx context.Context, src, dst *shardConn) error {
	read := func(sc *shardConn) (string, error) {
		var v int64
		var dirty bool
		err := sc.conn.QueryRow(ctx, "SELECT version, dirty FROM "+jobsMigrationTable).Scan(&v, &dirty)
		if errors.Is(err, pgx.ErrNoRows) {
			return "none", nil
		}
		if err != nil {
			return "", fmt.Errorf("slotmove: jobs schema on %s: %w", sc.name, err)
		}
		if dirty {
			return "", fmt.Errorf("slotmove: the jobs schema on %s is dirty at version %d; repair it (server migrate status) first", sc.name, v)
		}
		return fmt.Sprint(v), nil
	}
	a, err := read(src)
	if err != nil {
		return err
	}
	b, err := read(dst)
	if err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("slotmove: the jobs schema is at version %s on source %s but %s on target %s; migrate both cells first", a, src.name, b, dst.name)
	}
	return nil
}

// moveControlJobs moves the range's waiting and scheduled jobs between the
// two cells' control databases (the plain-enqueued jobs, without
// shard_local), when Config.SourceControl and TargetControl are set: the
// same locking, copy, verify and marker as for the shards' jobs. A
// running job stays at the source cell, counted in JobsLeftRunning.
func (mv *mover) moveControlJobs(ctx context.Context, rep *Report) error {
	sc, tc := mv.cfg.SourceControl, mv.cfg.TargetControl
	if sc.DSN == "" || tc.DSN == "" {
		return nil
	}
	connect := func(sh Shard) (*shardConn, error) {
		c, err := pgx.Connect(ctx, sh.DSN)
		if err != nil {
			return nil, fmt.Errorf("slotmove: control database %s: %w", sh.Name, err)
		}
		return &shardConn{name: sh.Name, conn: c}, nil
	}
	src, err := connect(sc)
	if err != nil {
		return err
	}
	defer src.conn.Close(context.WithoutCancel(ctx))
	ok, err := hasJobs(ctx, src.conn)
	if err != nil || !ok {
		return err
	}
	_, tenants, err := mv.jobTenants(ctx, src)
	if err != nil || len(tenants) == 0 {
		return err
	}
	dst, err := connect(tc)
	if err != nil {
		return err
	}
	defer dst.conn.Close(context.WithoutCancel(ctx))
	if err := mv.moveJobsTo(ctx, src, dst, tenants, rep); err != nil {
		return err
	}
	var running int64
	if err := src.conn.QueryRow(ctx, "SELECT count(*) FROM "+jobsTable+" WHERE state = 'running' AND tenant = ANY($1)", tenants).Scan(&running); err != nil {
		return fmt.Errorf("slotmove: jobs on %s: %w", src.name, err)
	}
	if running > 0 {
		rep.JobsLeftRunning += running
		mv.log.Warn("running jobs of moved tenants stay at the source; they finish there", "database", src.name, "jobs", running)
	}
	return nil
}
