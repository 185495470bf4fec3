-- Undoes 000004_tenant_limits.up.sql: the claim function as
-- 000002_queue_pause.up.sql made it and cellgate_jobs_vtimes as
-- 000001_jobs.up.sql did (byte for byte: TestMigrationDownOneStep compares
-- the catalogs), the places back to their unit, then the new functions,
-- indexes, table and column. Priorities are lost.
CREATE OR REPLACE FUNCTION cellgate_jobs_claim(
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
    v_paused  text[];
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

    -- The paused queues, read once: every candidate scan below skips their
    -- jobs. Usually none (one descent into an empty index); a pause binds
    -- on the claims that start after it commits.
    SELECT coalesce(array_agg(p.queue), '{}') INTO v_paused FROM cellgate_jobs_paused p;

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
                        AND j.queue <> ALL (v_paused)
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
                        AND j.queue <> ALL (v_paused)
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
                AND j.queue <> ALL (v_paused)
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
                               AND w.queue <> ALL (v_paused)
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
                AND j.queue <> ALL (v_paused)
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
                               AND w.queue <> ALL (v_paused)
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

CREATE OR REPLACE FUNCTION cellgate_jobs_vtimes(
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

DROP FUNCTION cellgate_jobs_insert(text, text, text, jsonb, integer, text, timestamptz, timestamptz, smallint);
DROP FUNCTION cellgate_jobs_insert_many(text[], text[], text[], text[], integer[], timestamptz[], timestamptz, smallint[]);
DROP INDEX cellgate_jobs_priority_idx;
DROP INDEX cellgate_jobs_tenant_priority_idx;
DROP INDEX cellgate_jobs_running_tenant_idx;
DROP TABLE cellgate_jobs_tenant_limits;
ALTER TABLE cellgate_jobs DROP COLUMN priority;
UPDATE cellgate_jobs SET vtime = vtime / 720720 WHERE vtime IS NOT NULL;
UPDATE cellgate_jobs_head SET vtime = vtime / 720720;
