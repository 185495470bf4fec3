-- Undoes 000008_capped_places.up.sql: the claim and insert functions as
-- 000004_tenant_limits.up.sql made them (byte for byte:
-- TestMigrationDownOneStep compares the catalogs), then the new functions,
-- the held jobs' index and column, and unplaced_idx as 000001 made it.
-- Held jobs become unplaced: fair claims place them when they are due.
-- cellgate_jobs_insert, as in 000001_jobs.up.sql, with the job's priority.
-- (The form without it stays for processes not upgraded yet: it inserts
-- priority 1.)
CREATE OR REPLACE FUNCTION cellgate_jobs_insert(
    p_kind         text,
    p_queue        text,
    p_tenant       text,
    p_args         jsonb,
    p_max_attempts integer,
    p_unique_key   text,
    p_run_at       timestamptz,
    p_now          timestamptz,
    p_priority     smallint,
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
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, unique_key, run_at, created_at, vtime, priority)
        VALUES (p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_unique_key, p_run_at, p_now, v_vtime, p_priority)
        ON CONFLICT (kind, tenant, unique_key)
            WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
            DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
            duplicate := false;
            RETURN;
        END IF;
        SELECT j.id INTO job_id FROM cellgate_jobs j
        WHERE j.kind = p_kind AND j.tenant = p_tenant AND j.unique_key = p_unique_key
          AND j.state IN ('available', 'running');
        IF job_id IS NOT NULL THEN
            duplicate := true;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

-- cellgate_jobs_insert_many, as in 000001_jobs.up.sql, with priorities.
CREATE OR REPLACE FUNCTION cellgate_jobs_insert_many(
    p_kinds        text[],
    p_queues       text[],
    p_tenants      text[],
    p_args         text[],
    p_max_attempts integer[],
    p_run_ats      timestamptz[],
    p_now          timestamptz,
    p_priorities   smallint[]
) RETURNS TABLE (job_id bigint) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan SET jit = off
AS $$
BEGIN
    RETURN QUERY
    INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime, priority)
    SELECT u.kind, u.queue, u.tenant, u.args::jsonb, u.max_attempts, u.run_at, p_now, u.vtime, u.priority
    FROM unnest(p_kinds, p_queues, p_tenants, p_args, p_max_attempts, p_run_ats,
                cellgate_jobs_vtimes(p_tenants, p_run_ats, p_now), p_priorities)
         WITH ORDINALITY AS u(kind, queue, tenant, args, max_attempts, run_at, vtime, priority, ord)
    ORDER BY u.ord
    RETURNING id;
END;
$$;

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
    v_full     text[] := '{}';
    v_fullt    text[] := '{}';
    v_tcaps    boolean;
    v_paused   text[];
    v_ids      bigint[];
    v_tids     tid[];
    v_kinds    text[];
    v_tenants  text[];
    v_prios    smallint[];
    v_vtimes   bigint[];
    v_run_ats  timestamptz[];
    v_horizon  bigint;
    v_horizon_at timestamptz;
    v_mv_tids  tid[] := '{}';
    v_mv_vt    bigint[] := '{}';
    v_mv_for   bigint[] := '{}';
    v_kind     text;
    v_room     integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);

    SELECT coalesce(array_agg(p.queue), '{}') INTO v_paused FROM cellgate_jobs_paused p;

    IF cardinality(p_done) > 0 THEN
        UPDATE cellgate_jobs j
        SET state = 'completed', finished_at = p_now
        FROM unnest(p_done, p_done_att) AS c(id, attempt)
        WHERE j.id = c.id AND j.attempt = c.attempt AND j.state = 'running';
    END IF;

    IF p_fair THEN
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
            v_tenants := NULL;
        END IF;
    END IF;

    IF cardinality(p_cap_kinds) > 0 THEN
        SELECT coalesce(array_agg(c.kind), '{}') INTO v_full
        FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
        WHERE (SELECT count(*) FROM cellgate_jobs j
               WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = c.kind) >= c.cap;
    END IF;

    -- The tenants at their cap: from the running jobs (few), each checked
    -- against its limits row.
    v_tcaps := EXISTS (SELECT 1 FROM cellgate_jobs_tenant_limits l WHERE l.max_running > 0);
    IF v_tcaps THEN
        SELECT coalesce(array_agg(r.tenant), '{}') INTO v_fullt
        FROM (SELECT j.tenant, count(*) AS n FROM cellgate_jobs j
              WHERE j.state = 'running' AND j.attempt > 0 AND j.tenant <> ''
              GROUP BY j.tenant) r
        JOIN cellgate_jobs_tenant_limits l ON l.tenant = r.tenant
        WHERE l.max_running > 0 AND r.n >= l.max_running;
    END IF;

    -- A scalar subquery ordered by vtime walks cellgate_jobs_priority_idx
    -- (only the jobs of priority after 1). EXISTS would not do: the
    -- planner drops its ORDER BY, and a plan made while the table was
    -- empty may then read all of the tenant-priority index.
    IF cardinality(p_cap_kinds) = 0 AND NOT v_tcaps AND NOT (p_fair AND (
           SELECT j.vtime FROM cellgate_jobs j
           WHERE j.state = 'available' AND j.vtime IS NOT NULL AND j.priority > 1
             AND j.queue <> ALL (v_paused)
           ORDER BY j.vtime LIMIT 1) IS NOT NULL) THEN
        -- No caps and no priorities to honour: lock and claim in one
        -- statement, as in 000002.
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

    -- The candidates go through arrays, so that the jobs over a cap can be
    -- dropped and a place handed to a job of higher priority before the
    -- update. With a kind or a tenant at its cap, the next p_limit jobs of
    -- the others up to the place (or run_at) of the p_lookahead-th next
    -- job.
    IF p_fair AND cardinality(v_full) = 0 AND cardinality(v_fullt) = 0 THEN
        SELECT array_agg(s.id ORDER BY s.vtime, s.id), array_agg(s.ctid ORDER BY s.vtime, s.id),
               array_agg(s.kind ORDER BY s.vtime, s.id), array_agg(s.tenant ORDER BY s.vtime, s.id),
               array_agg(s.priority ORDER BY s.vtime, s.id), array_agg(s.vtime ORDER BY s.vtime, s.id)
        INTO v_ids, v_tids, v_kinds, v_tenants, v_prios, v_vtimes
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.priority, j.vtime FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.vtime IS NOT NULL
                AND j.queue <> ALL (v_paused)
              ORDER BY j.vtime, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSIF p_fair THEN
        -- The window's last place, read once: a window in an IN (...)
        -- subquery may be planned as a semi join that reads it again for
        -- every row.
        SELECT max(x.vtime) INTO v_horizon
        FROM (SELECT w.vtime FROM cellgate_jobs w
              WHERE w.state = 'available' AND w.vtime IS NOT NULL
                AND w.queue <> ALL (v_paused)
              ORDER BY w.vtime, w.id
              LIMIT p_lookahead) x;
        SELECT array_agg(s.id ORDER BY s.vtime, s.id), array_agg(s.ctid ORDER BY s.vtime, s.id),
               array_agg(s.kind ORDER BY s.vtime, s.id), array_agg(s.tenant ORDER BY s.vtime, s.id),
               array_agg(s.priority ORDER BY s.vtime, s.id), array_agg(s.vtime ORDER BY s.vtime, s.id)
        INTO v_ids, v_tids, v_kinds, v_tenants, v_prios, v_vtimes
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.priority, j.vtime FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.vtime IS NOT NULL AND j.vtime <= v_horizon
                AND j.queue <> ALL (v_paused)
                AND j.kind <> ALL (v_full) AND j.tenant <> ALL (v_fullt)
              ORDER BY j.vtime, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSIF cardinality(v_full) = 0 AND cardinality(v_fullt) = 0 THEN
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id), array_agg(s.tenant ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds, v_tenants
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.run_at FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND j.run_at <= p_now
                AND j.queue <> ALL (v_paused)
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSE
        SELECT max(x.run_at) INTO v_horizon_at
        FROM (SELECT w.run_at FROM cellgate_jobs w
              WHERE w.state = 'available' AND w.queue IS NOT NULL AND w.run_at <= p_now
                AND w.queue <> ALL (v_paused)
              ORDER BY w.run_at, w.id
              LIMIT p_lookahead) x;
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id), array_agg(s.tenant ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds, v_tenants
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.run_at FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND j.run_at <= v_horizon_at
                AND j.queue <> ALL (v_paused)
                AND j.kind <> ALL (v_full) AND j.tenant <> ALL (v_fullt)
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    END IF;

    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- Priority within a tenant: the k candidates of a tenant with one of
    -- priority above 1 are its k places in this claim; they go to the
    -- tenant's k best waiting jobs by (priority, place) from its first
    -- candidate's place on (those before it were candidates themselves,
    -- or are locked by another claim), in that order. A candidate left out
    -- takes the place of a job claimed in its stead, so the tenant keeps
    -- its places. One statement for all tenants.
    IF p_fair AND 1 < ANY (v_prios) THEN
        WITH c AS MATERIALIZED (
            SELECT u.i, u.id, u.tid, u.tenant, u.prio, u.vt, u.kind
            FROM unnest(v_ids, v_tids, v_tenants, v_prios, v_vtimes, v_kinds)
                 WITH ORDINALITY AS u(id, tid, tenant, prio, vt, kind, i)),
        t AS MATERIALIZED (
            SELECT c.tenant, count(*) AS k, min(c.vt) AS minv FROM c
            GROUP BY c.tenant HAVING max(c.prio) > 1),
        best AS MATERIALIZED (
            SELECT t.tenant, b.id, b.tid, b.kind, b.vtime,
                   row_number() OVER (PARTITION BY t.tenant ORDER BY b.priority, b.vtime) AS m
            FROM t CROSS JOIN LATERAL (
                SELECT j.id, j.ctid AS tid, j.kind, j.vtime, j.priority FROM cellgate_jobs j
                WHERE j.state = 'available' AND j.vtime IS NOT NULL AND j.priority > 0
                  AND j.tenant = t.tenant AND j.vtime >= t.minv
                  AND j.queue <> ALL (v_paused) AND j.kind <> ALL (v_full)
                ORDER BY j.priority, j.vtime
                LIMIT t.k
                FOR UPDATE SKIP LOCKED) b),
        slot AS (
            SELECT c.i, c.id, c.tid, c.kind, c.tenant,
                   row_number() OVER (PARTITION BY c.tenant ORDER BY c.i) AS m
            FROM c),
        final AS MATERIALIZED (
            SELECT s.i, coalesce(b.id, s.id) AS id, coalesce(b.tid, s.tid) AS tid, coalesce(b.kind, s.kind) AS kind
            FROM slot s LEFT JOIN best b ON b.tenant = s.tenant AND b.m = s.m),
        displaced AS (
            SELECT c.tid, c.tenant, row_number() OVER (PARTITION BY c.tenant ORDER BY c.vt) AS r
            FROM c WHERE c.tenant IN (SELECT t.tenant FROM t)
              AND c.id NOT IN (SELECT b.id FROM best b)),
        newcomer AS (
            SELECT b.id, b.vtime, b.tenant, row_number() OVER (PARTITION BY b.tenant ORDER BY b.vtime) AS r
            FROM best b WHERE b.id NOT IN (SELECT c.id FROM c)),
        moves AS MATERIALIZED (
            SELECT d.tid, n.vtime, n.id FROM displaced d JOIN newcomer n ON n.tenant = d.tenant AND n.r = d.r)
        SELECT (SELECT array_agg(f.id ORDER BY f.i) FROM final f),
               (SELECT array_agg(f.tid ORDER BY f.i) FROM final f),
               (SELECT array_agg(f.kind ORDER BY f.i) FROM final f),
               (SELECT coalesce(array_agg(mv.tid), '{}') FROM moves mv),
               (SELECT coalesce(array_agg(mv.vtime), '{}') FROM moves mv),
               (SELECT coalesce(array_agg(mv.id), '{}') FROM moves mv)
        INTO v_ids, v_tids, v_kinds, v_mv_tids, v_mv_vt, v_mv_for;
    END IF;

    -- Kinds' caps, as in 000002. Locks in one order (by kind) in every
    -- claimer: no deadlocks.
    IF cardinality(p_cap_kinds) > 0 THEN
        FOR v_kind, v_room IN
            SELECT c.kind, c.cap FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
            WHERE c.kind = ANY (v_kinds)
            ORDER BY c.kind COLLATE "C"
        LOOP
            PERFORM pg_advisory_xact_lock(1667723883, hashtext(v_kind));
            SELECT v_room - count(*) INTO v_room FROM cellgate_jobs j
            WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = v_kind;
            FOR i IN 1 .. cardinality(v_ids) LOOP
                IF v_kinds[i] = v_kind AND v_ids[i] IS NOT NULL THEN
                    IF v_room > 0 THEN
                        v_room := v_room - 1;
                    ELSE
                        v_ids[i] := NULL;
                        v_tids[i] := NULL;
                    END IF;
                END IF;
            END LOOP;
        END LOOP;
    END IF;

    -- Tenants' caps: the capped tenants among the candidates are locked
    -- after the kinds' locks, in the order of the lock keys (two tenants
    -- may share a key), so claimers never deadlock; then one count, whose
    -- fresh snapshot sees every job claimed by the claims that held the
    -- locks before, keeps each tenant's first candidates up to its room.
    IF v_tcaps THEN
        PERFORM pg_advisory_xact_lock(1667723884, k.key)
        FROM (SELECT DISTINCT hashtext(l.tenant) AS key FROM cellgate_jobs_tenant_limits l
              WHERE l.tenant = ANY (v_tenants) AND l.max_running > 0
              ORDER BY 1) k;
        SELECT array_agg(CASE WHEN x.keep THEN x.id END ORDER BY x.i),
               array_agg(CASE WHEN x.keep THEN x.tid END ORDER BY x.i)
        INTO v_ids, v_tids
        FROM (SELECT c.i, c.id, c.tid,
                     l.max_running IS NULL
                     OR row_number() OVER (PARTITION BY c.tenant, c.id IS NULL ORDER BY c.i)
                        <= l.max_running - coalesce(r.n, 0) AS keep
              FROM unnest(v_ids, v_tids, v_tenants) WITH ORDINALITY AS c(id, tid, tenant, i)
              LEFT JOIN cellgate_jobs_tenant_limits l ON l.tenant = c.tenant AND l.max_running > 0
              LEFT JOIN (SELECT j.tenant, count(*) AS n FROM cellgate_jobs j
                         WHERE j.state = 'running' AND j.attempt > 0 AND j.tenant <> ''
                           AND j.tenant = ANY (v_tenants)
                         GROUP BY j.tenant) r ON r.tenant = c.tenant) x;
    END IF;

    IF p_fair THEN
        -- The head is the highest place claimed: the candidates' places
        -- (a job claimed in another's place took that place).
        UPDATE cellgate_jobs_head hd SET vtime = m.vtime
        FROM (SELECT max(u.vtime) AS vtime FROM unnest(v_ids, v_vtimes) AS u(id, vtime)
              WHERE u.id IS NOT NULL) m
        WHERE m.vtime > hd.vtime;
        IF cardinality(v_mv_tids) > 0 THEN
            UPDATE cellgate_jobs j SET vtime = m.vtime
            FROM unnest(v_mv_tids, v_mv_vt, v_mv_for) AS m(tid, vtime, bid)
            WHERE j.ctid = m.tid AND m.bid = ANY (v_ids);
        END IF;
    END IF;

    RETURN QUERY
    UPDATE cellgate_jobs j
    SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
        heartbeat_at = p_now, claimed_by = p_claimed_by
    WHERE j.ctid = ANY (v_tids)
    RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
              array_position(v_ids, j.id);
END;
$$;

DROP FUNCTION cellgate_jobs_refill(text[], integer[], timestamptz);
DROP FUNCTION cellgate_jobs_places(text[], timestamptz[], timestamptz);
DROP INDEX cellgate_jobs_unplaced_idx;
DROP INDEX cellgate_jobs_held_idx;
ALTER TABLE cellgate_jobs DROP COLUMN held;
CREATE INDEX cellgate_jobs_unplaced_idx ON cellgate_jobs (run_at, id)
    WHERE state = 'available' AND vtime IS NULL;

-- At version 7 claims are durable (000007_durable_claims): the function
-- restored above keeps its body's synchronous_commit = off to itself.
ALTER FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text[], integer[], integer, text, bigint[], integer[], integer)
    SET synchronous_commit = on;
