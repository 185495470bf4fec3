-- The PostgreSQL job backend's schema (internal/jobs/pgjobs). pgjobs embeds
-- this file and applies it with pgjobs.Migrate under a migrations table of
-- its own, cellgate_jobs_schema_migrations, so its versions never mix with
-- the app's (sql/migrations, schema_migrations). It runs on the control
-- database and, with jobs.postgres.shard_local, on every shard.
-- docs/jobs-postgres.md explains the states, the indexes and the claim SQL.
--
-- A job is 'available' (waiting; run_at says from when: now, later, or after
-- a retry's backoff), 'running' (claimed; heartbeat_at is refreshed by the
-- claiming process), then 'completed' or 'failed' (kept for the retention
-- period, then deleted by the maintenance leader).
CREATE TABLE cellgate_jobs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    -- '' is "no tenant". COLLATE "C": tenants compare and sort in byte
    -- order, which must not depend on the database's locale.
    tenant       text        COLLATE "C" NOT NULL DEFAULT '',
    args         jsonb       NOT NULL,
    state        text        NOT NULL DEFAULT 'available'
                             CHECK (state IN ('available', 'running', 'completed', 'failed')),
    attempt      integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    run_at       timestamptz NOT NULL,
    -- NULL for kinds without unique_by.
    unique_key   text,
    -- One {"attempt", "at", "error"} object per failed attempt.
    errors       jsonb       NOT NULL DEFAULT '[]',
    created_at   timestamptz NOT NULL,
    attempted_at timestamptz,
    heartbeat_at timestamptz,
    finished_at  timestamptz,
    -- host/pid of the process that ran the latest attempt, for operators.
    claimed_by   text,
    -- The job's place in the fair order. Fair claims go by virtual time:
    -- each ready job gets a place in one fair order when it is enqueued
    -- (or, for a job that becomes ready later, when a fair claim first sees
    -- it due), and a fair claim reads that order from one index, as a FIFO
    -- claim reads run_at order: no walk over the tenants.
    -- docs/jobs-postgres.md has the rule, its guarantees and its costs.
    -- NULL while the job is not placed (scheduled for later, back from a
    -- retry or a rescue, or inserted by hand without it). A job's vtime is
    -- set only while it is ready (run_at <= the time it was placed), so a
    -- placed job never waits for its run_at.
    vtime        bigint
) WITH (
    -- A queue table churns: vacuum and analyze it long before the 20 %
    -- default, where autovacuum runs at all.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);

-- Each claim index has its own extra (always true) condition, which only
-- the queries meant for it repeat: a query can then use no other index, so
-- the plans of the claim function, made once per session while the table
-- may be small, cannot pick an index that becomes a scan of the whole
-- backlog later (FIFO order from a fair index plus a sort, say).

-- FIFO claims: the oldest ready job. (queue IS NOT NULL: FIFO queries only.)
CREATE INDEX cellgate_jobs_fifo_idx ON cellgate_jobs (run_at, id)
    WHERE state = 'available' AND queue IS NOT NULL;

-- Fair claims: the placed jobs in fair order. (vtime IS NOT NULL: only the
-- fair queries say it, as with the other claim indexes.)
CREATE INDEX cellgate_jobs_vtime_idx ON cellgate_jobs (vtime, id)
    WHERE state = 'available' AND vtime IS NOT NULL;

-- Placing: the last place a tenant holds.
CREATE INDEX cellgate_jobs_tenant_vtime_idx ON cellgate_jobs (tenant, vtime)
    WHERE state = 'available' AND vtime IS NOT NULL;

-- Placing: the jobs not placed yet, by when they are due. Small: it holds
-- scheduled jobs and the few placed by the next fair claim.
CREATE INDEX cellgate_jobs_unplaced_idx ON cellgate_jobs (run_at, id)
    WHERE state = 'available' AND vtime IS NULL;

-- Uniqueness keys hold among active jobs only: once a job completes or
-- fails, the same key may be enqueued again.
CREATE UNIQUE INDEX cellgate_jobs_unique_idx ON cellgate_jobs (kind, tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('available', 'running');

-- Per-kind concurrency counts and the rescue of jobs whose process died
-- (the running jobs are few, so rescue reads them all). heartbeat_at is not
-- indexed, so a heartbeat is a HOT update. (attempt > 0: only those
-- queries; a lookup by id must use the primary key, not this index, which
-- also holds the dead entries of every job run since the last vacuum.)
CREATE INDEX cellgate_jobs_running_idx ON cellgate_jobs (kind)
    WHERE state = 'running' AND attempt > 0;

-- The retention sweep needs no index of its own: it walks the primary key
-- from the oldest job, and the oldest jobs are the finished ones.

-- The head of the fair order: the highest place claimed so far, which fair
-- claims raise. Reading the lowest waiting place from vtime_idx instead
-- would step over the entries of the jobs claimed since the last vacuum
-- (about 60 buffers per enqueue in the continuous benchmark). One row.
CREATE TABLE cellgate_jobs_head (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    vtime bigint  NOT NULL
) WITH (
    -- Every fair claim updates the row (a HOT update, a new version on
    -- the same page). A page fuller than its fill factor is pruned on the
    -- next visit, so with 10 % the chain of dead versions that each read
    -- walks stays a few dozen long instead of a page's worth.
    fillfactor = 10
);
-- Its one row: nothing claimed yet.
INSERT INTO cellgate_jobs_head (vtime) VALUES (0);

-- Plans. The functions below pin their plans to index access (SET
-- enable_seqscan etc. off; the claim function also disables sorts, so an
-- ORDER BY ... LIMIT is read in order from the index made for it) and plan
-- each statement once per session (force_generic_plan). A session
-- caches a function's plans, and a queue table swings from empty to
-- millions of rows between two statistics updates, so a plan chosen while
-- the table was small (a sequential scan, a hash join, the wrong index and
-- a sort) would later read the whole table on every call. Every statement
-- in them has an index path whose cost follows the rows it returns, not
-- the table's size, and these settings leave the planner only that path.
-- jit = off: a disabled plan type adds a huge nominal cost, which would
-- otherwise make PostgreSQL JIT-compile these millisecond statements (a
-- third of a second, on every call).

-- cellgate_jobs_vtimes returns the places of new jobs of p_tenants due at
-- p_run_ats (in that order; NULL for a job not due at p_now, which is
-- placed when a fair claim finds it due).
--
-- The rule (start-time fair queuing, with one job as the unit of work): a
-- tenant's next job goes one place after the tenant's last placed job that
-- is still waiting, but never at or before the head of the fair order (the
-- highest place claimed, cellgate_jobs_head). So a tenant with a backlog
-- holds one place per job ahead of it, a tenant with nothing waiting joins
-- the next round, and the claims, which take places in order (ties by id),
-- serve every tenant with waiting jobs one job per round. Joining after the
-- head, never at it, keeps a tenant that enqueues its next job whenever
-- the last one ends from taking the head's place again and again while
-- the tenants behind it wait. Several jobs of one tenant in one call take
-- consecutive places.
--
-- It has no settings of its own: it runs inside the functions below, under
-- theirs (a SET clause costs every call a save and restore of each setting).
CREATE FUNCTION cellgate_jobs_vtimes(
    p_tenants text[],
    p_run_ats timestamptz[],
    p_now     timestamptz
) RETURNS bigint[] LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_out bigint[];
BEGIN
    SELECT array_agg(CASE WHEN u.ready THEN greatest(coalesce(l.next, 0), h.head + 1) + u.k END ORDER BY u.o)
    INTO v_out
    FROM (SELECT coalesce((SELECT hd.vtime FROM cellgate_jobs_head hd), 0) AS head) h
    CROSS JOIN (SELECT t.tenant, t.run_at <= p_now AS ready, t.o,
                       count(*) FILTER (WHERE t.run_at <= p_now) OVER (PARTITION BY t.tenant ORDER BY t.o) - 1 AS k
                FROM unnest(p_tenants, p_run_ats) WITH ORDINALITY AS t(tenant, run_at, o)) u
    -- vtime > head bounds the backward scan (a place at or below the head
    -- would not count): PostgreSQL reads every entry of the tenant on the
    -- leaf page, and those below the head are mostly of claimed jobs,
    -- dead until the next vacuum.
    LEFT JOIN LATERAL (SELECT x.vtime + 1 AS next FROM cellgate_jobs x
                       WHERE x.state = 'available' AND x.vtime IS NOT NULL AND x.tenant = u.tenant
                         AND x.vtime > h.head
                       ORDER BY x.vtime DESC
                       LIMIT 1) l ON u.ready;
    RETURN v_out;
END;
$$;

-- cellgate_jobs_insert inserts one job, or finds the active job with the
-- same (kind, tenant, unique_key), in one round trip. It does not NOTIFY:
-- a NOTIFY makes its transaction take a cluster-wide lock through commit
-- (WAL flush included), which would serialize every transaction that
-- enqueues. The backend sends the NOTIFY in a statement of its own.
-- A ready job is placed in the fair order as it is inserted
-- (cellgate_jobs_vtimes).
CREATE FUNCTION cellgate_jobs_insert(
    p_kind         text,
    p_queue        text,
    p_tenant       text,
    p_args         jsonb,
    p_max_attempts integer,
    p_unique_key   text,
    p_run_at       timestamptz,
    p_now          timestamptz,
    OUT job_id     bigint,
    OUT duplicate  boolean
) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    v_vtime bigint := (cellgate_jobs_vtimes(ARRAY[p_tenant], ARRAY[p_run_at], p_now))[1];
BEGIN
    LOOP
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, unique_key, run_at, created_at, vtime)
        VALUES (p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_unique_key, p_run_at, p_now, v_vtime)
        ON CONFLICT (kind, tenant, unique_key)
            WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
            DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
            duplicate := false;
            RETURN;
        END IF;
        -- A new statement, a new snapshot: it sees the conflicting job even
        -- when its transaction committed while the INSERT waited for it.
        SELECT j.id INTO job_id FROM cellgate_jobs j
        WHERE j.kind = p_kind AND j.tenant = p_tenant AND j.unique_key = p_unique_key
          AND j.state IN ('available', 'running');
        IF job_id IS NOT NULL THEN
            duplicate := true;
            RETURN;
        END IF;
        -- The conflicting job finished in between: insert again.
    END LOOP;
END;
$$;

-- cellgate_jobs_insert_many inserts jobs given as parallel arrays, placing
-- the ready ones, and returns their ids in input order: the backend's
-- batched plain enqueue, one statement and one commit for many callers.
CREATE FUNCTION cellgate_jobs_insert_many(
    p_kinds        text[],
    p_queues       text[],
    p_tenants      text[],
    p_args         text[],
    p_max_attempts integer[],
    p_run_ats      timestamptz[],
    p_now          timestamptz
) RETURNS TABLE (job_id bigint) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
BEGIN
    -- Identities are drawn in the SELECT's order, the input order.
    RETURN QUERY
    INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime)
    SELECT u.kind, u.queue, u.tenant, u.args::jsonb, u.max_attempts, u.run_at, p_now, u.vtime
    FROM unnest(p_kinds, p_queues, p_tenants, p_args, p_max_attempts, p_run_ats,
                cellgate_jobs_vtimes(p_tenants, p_run_ats, p_now))
         WITH ORDINALITY AS u(kind, queue, tenant, args, max_attempts, run_at, vtime, ord)
    ORDER BY u.ord
    RETURNING id;
END;
$$;

-- cellgate_jobs_complete marks running jobs completed, each only at the
-- attempt given (an attempt that was rescued in the meantime has lost the
-- job), without waiting for the WAL flush: a completion lost in a crash
-- makes the job run again, which at-least-once allows. It returns the
-- number of jobs completed.
CREATE FUNCTION cellgate_jobs_complete(
    p_ids      bigint[],
    p_attempts integer[],
    p_now      timestamptz
) RETURNS integer LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    n integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    -- A nested loop of primary-key probes (hash and merge joins are off):
    -- the running jobs' partial index would also match, but it holds the
    -- dead entries of every job that ran since the last vacuum.
    UPDATE cellgate_jobs j
    SET state = 'completed', finished_at = p_now
    FROM unnest(p_ids, p_attempts) AS c(id, attempt)
    WHERE j.id = c.id AND j.attempt = c.attempt AND j.state = 'running';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;

-- cellgate_jobs_claim claims up to p_limit ready jobs in one round trip and
-- returns them with their hand-out order (job_ord). It first completes the
-- jobs p_done (at attempts p_done_att), the caller's buffered completions.
--
-- FIFO (p_fair = false): the oldest ready jobs by (run_at, id).
-- Fair (p_fair = true): first it places up to p_place jobs that are due
-- but not placed (oldest first; see cellgate_jobs_vtimes), then takes the
-- placed jobs in fair order, (vtime, id).
--
-- p_cap_kinds/p_caps are the caller's per-kind concurrency caps. Kinds at
-- their cap are skipped; the jobs of a capped kind that are claimed are
-- recounted under a per-kind advisory lock (class 1667723883), so
-- concurrent claimers never exceed the cap. A job behind more than
-- p_lookahead jobs of kinds at their cap (in the claim's order) waits until
-- one of them has room.
CREATE FUNCTION cellgate_jobs_claim(
    p_now        timestamptz,
    p_limit      integer,
    p_fair       boolean,
    p_cap_kinds  text[],
    p_caps       integer[],
    p_lookahead  integer,
    p_claimed_by text,
    p_done       bigint[],
    p_done_att   integer[],
    p_place      integer
) RETURNS TABLE (
    job_id           bigint,
    job_kind         text,
    job_queue        text,
    job_tenant       text,
    job_args         jsonb,
    job_attempt      integer,
    job_max_attempts integer,
    job_created_at   timestamptz,
    job_ord          integer
) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_sort = off SET enable_incremental_sort = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
DECLARE
    v_full    text[] := '{}';
    v_ids     bigint[];
    v_tids    tid[];
    v_kinds   text[];
    v_tenants text[];
    v_run_ats timestamptz[];
    v_kind    text;
    v_room    integer;
    i         integer;
BEGIN
    -- A claim lost in a crash is rescued and the job runs again, so the
    -- claim need not wait for its WAL flush.
    PERFORM set_config('synchronous_commit', 'off', true);

    -- The caller's buffered completions ride along: they free capacity of
    -- capped kinds before it is counted.
    IF cardinality(p_done) > 0 THEN
        -- cellgate_jobs_complete's statement, inline: a nested call would
        -- cost a second function entry (and its settings) per claim.
        UPDATE cellgate_jobs j
        SET state = 'completed', finished_at = p_now
        FROM unnest(p_done, p_done_att) AS c(id, attempt)
        WHERE j.id = c.id AND j.attempt = c.attempt AND j.state = 'running';
    END IF;

    IF p_fair THEN
        -- Place the jobs that became due since (scheduled, retried,
        -- rescued). Usually none: one descent into a small index.
        SELECT array_agg(s.ctid ORDER BY s.run_at, s.id), array_agg(s.tenant ORDER BY s.run_at, s.id),
               array_agg(s.run_at ORDER BY s.run_at, s.id)
        INTO v_tids, v_tenants, v_run_ats
        FROM (SELECT j.ctid, j.tenant, j.run_at, j.id FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.vtime IS NULL AND j.run_at <= p_now
              ORDER BY j.run_at, j.id
              LIMIT p_place
              FOR UPDATE SKIP LOCKED) s;
        IF v_tids IS NOT NULL THEN
            UPDATE cellgate_jobs j SET vtime = p.vtime
            FROM unnest(v_tids, cellgate_jobs_vtimes(v_tenants, v_run_ats, p_now))
                 AS p(tid, vtime)
            WHERE j.ctid = p.tid;
            v_tids := NULL;
        END IF;
    END IF;

    IF cardinality(p_cap_kinds) > 0 THEN
        SELECT coalesce(array_agg(c.kind), '{}') INTO v_full
        FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
        WHERE (SELECT count(*) FROM cellgate_jobs j
               WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = c.kind) >= c.cap;
    END IF;

    IF cardinality(p_cap_kinds) = 0 THEN
        -- No caps: lock and claim in one statement. The locked rows keep
        -- their addresses until commit, so the update finds them by TID.
        IF p_fair THEN
            RETURN QUERY
            WITH locked AS MATERIALIZED (
                SELECT s.tid, s.vtime, (row_number() OVER ())::integer AS ord
                FROM (SELECT j.ctid AS tid, j.vtime FROM cellgate_jobs j
                      WHERE j.state = 'available' AND j.vtime IS NOT NULL
                      ORDER BY j.vtime, j.id
                      LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) s),
            head AS (
                -- Last in the claim, so the row lock that orders
                -- concurrent claimers is held only until commit.
                UPDATE cellgate_jobs_head hd SET vtime = m.vtime
                FROM (SELECT max(l.vtime) AS vtime FROM locked l) m
                WHERE m.vtime > hd.vtime)
            UPDATE cellgate_jobs j
            SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
                heartbeat_at = p_now, claimed_by = p_claimed_by
            FROM locked
            WHERE j.ctid = locked.tid
            RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
                      locked.ord;
        ELSE
            RETURN QUERY
            WITH locked AS MATERIALIZED (
                SELECT s.tid, (row_number() OVER ())::integer AS ord
                FROM (SELECT j.ctid AS tid FROM cellgate_jobs j
                      WHERE j.state = 'available' AND j.queue IS NOT NULL AND j.run_at <= p_now
                      ORDER BY j.run_at, j.id
                      LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) s)
            UPDATE cellgate_jobs j
            SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
                heartbeat_at = p_now, claimed_by = p_claimed_by
            FROM locked
            WHERE j.ctid = locked.tid
            RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
                      locked.ord;
        END IF;
        RETURN;
    END IF;

    -- With caps: the candidates go through arrays, so that the jobs over a
    -- cap can be dropped before the update. Without a kind at its cap, the
    -- next p_limit jobs; with one, the next p_limit jobs of other kinds
    -- among the next p_lookahead.
    IF p_fair AND cardinality(v_full) = 0 THEN
        SELECT array_agg(s.id ORDER BY s.vtime, s.id), array_agg(s.ctid ORDER BY s.vtime, s.id),
               array_agg(s.kind ORDER BY s.vtime, s.id)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT j.id, j.ctid, j.kind, j.vtime FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.vtime IS NOT NULL
              ORDER BY j.vtime, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSIF p_fair THEN
        SELECT array_agg(s.id ORDER BY s.vtime, s.id), array_agg(s.ctid ORDER BY s.vtime, s.id),
               array_agg(s.kind ORDER BY s.vtime, s.id)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT j.id, j.ctid, j.kind, j.vtime FROM cellgate_jobs j
              WHERE j.id IN (SELECT w.id FROM cellgate_jobs w
                             WHERE w.state = 'available' AND w.vtime IS NOT NULL
                             ORDER BY w.vtime, w.id
                             LIMIT p_lookahead)
                AND j.state = 'available' AND j.vtime IS NOT NULL
                AND j.kind <> ALL (v_full)
              ORDER BY j.vtime, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSIF cardinality(v_full) = 0 THEN
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT j.id, j.ctid, j.kind, j.run_at FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND j.run_at <= p_now
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSE
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT j.id, j.ctid, j.kind, j.run_at FROM cellgate_jobs j
              WHERE j.id IN (SELECT w.id FROM cellgate_jobs w
                             WHERE w.state = 'available' AND w.queue IS NOT NULL AND w.run_at <= p_now
                             ORDER BY w.run_at, w.id
                             LIMIT p_lookahead)
                AND j.state = 'available' AND j.run_at <= p_now
                AND j.kind <> ALL (v_full)
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    END IF;

    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- Locks in one order (by kind) in every claimer: no deadlocks.
    FOR v_kind, v_room IN
        SELECT c.kind, c.cap FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
        WHERE c.kind = ANY (v_kinds)
        ORDER BY c.kind COLLATE "C"
    LOOP
        PERFORM pg_advisory_xact_lock(1667723883, hashtext(v_kind));
        -- A fresh snapshot: every claim that held the lock before has
        -- committed, so its running jobs are counted.
        SELECT v_room - count(*) INTO v_room FROM cellgate_jobs j
        WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = v_kind;
        FOR i IN 1 .. cardinality(v_ids) LOOP
            IF v_kinds[i] = v_kind THEN
                IF v_room > 0 THEN
                    v_room := v_room - 1;
                ELSE
                    v_ids[i] := NULL;
                    v_tids[i] := NULL;
                END IF;
            END IF;
        END LOOP;
    END LOOP;

    IF p_fair THEN
        UPDATE cellgate_jobs_head hd SET vtime = m.vtime
        FROM (SELECT max(j.vtime) AS vtime FROM cellgate_jobs j WHERE j.ctid = ANY (v_tids)) m
        WHERE m.vtime > hd.vtime;
    END IF;

    -- By address (a TID scan): the rows are locked, so their addresses
    -- hold until commit.
    RETURN QUERY
    UPDATE cellgate_jobs j
    SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
        heartbeat_at = p_now, claimed_by = p_claimed_by
    WHERE j.ctid = ANY (v_tids)
    RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
              array_position(v_ids, j.id);
END;
$$;
