-- Tenants at their caps never stop the other tenants' claims
-- (docs/jobs-postgres.md, "Tenant caps, weights and priorities").
--
-- A claim that found a kind or a tenant at its cap looked for the others'
-- jobs only within a window: the next CapLookahead jobs in claim order.
-- A tenant at its cap holds at most greatest(max_running, 32) places (its
-- later jobs are held), so the window was skipped while the tenants at
-- their caps held no more places together than the window; past that (9
-- tenants at their caps with backlogs, by default), the window was all
-- theirs, and every claim took nothing until one of their jobs ended. In
-- FIFO order the held jobs were not even stepped over: one capped tenant
-- with a backlog of CapLookahead older jobs stopped every other tenant.
-- (TestTenantsAtCapNeverStarveOthers: an uncapped tenant ran 23 of its 200
-- jobs in 10 s beside 12 tenants at a cap of 1, fair; 0 of 200, FIFO.)
--
-- Now the window is only for kinds at their caps (a kind's backlog has no
-- quota). With only tenants at their caps, a claim steps over their placed
-- jobs, at most their quotas, in either order: the FIFO index leaves out
-- held jobs, and FIFO claims take placed jobs only, which the claims of
-- their tenants refill as in the fair order. cellgate_jobs_claim is as in
-- 000009 otherwise.
DROP INDEX cellgate_jobs_fifo_idx;
CREATE INDEX cellgate_jobs_fifo_idx ON cellgate_jobs (run_at, id)
    WHERE state = 'available' AND queue IS NOT NULL AND NOT held;

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
    v_capped   text[];
    v_prio     boolean;
    v_busy     text[] := '{}';
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
              WHERE j.state = 'available' AND j.vtime IS NULL AND NOT j.held AND j.run_at <= p_now
              ORDER BY j.run_at, j.id
              LIMIT p_place
              FOR UPDATE SKIP LOCKED) s;
        IF v_tids IS NOT NULL THEN
            UPDATE cellgate_jobs j SET vtime = nullif(p.vtime, 0), held = coalesce(p.vtime = 0, false)
            FROM unnest(v_tids, cellgate_jobs_places(v_tenants, v_run_ats, p_now))
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

    -- One statement: the paused queues; whether any tenant is capped and,
    -- if so, the tenants at their cap (from the running jobs, few, each
    -- checked against its limits row); and (fair) whether any waiting
    -- placed job has a priority after 1. (c.tcaps gates the count of
    -- running jobs: without capped tenants it reads nothing.) A scalar
    -- subquery ordered by vtime walks
    -- cellgate_jobs_priority_idx (only the jobs of priority after 1).
    -- EXISTS would not do: the planner drops its ORDER BY, and a plan made
    -- while the table was empty may then read all of the tenant-priority
    -- index.
    SELECT q.queues, c.tcaps, coalesce(f.tenants, '{}'),
           p_fair AND (SELECT j.vtime FROM cellgate_jobs j
                       WHERE j.state = 'available' AND j.vtime IS NOT NULL AND j.priority > 1
                         AND j.queue <> ALL (q.queues)
                       ORDER BY j.vtime LIMIT 1) IS NOT NULL
    INTO v_paused, v_tcaps, v_fullt, v_prio
    FROM (SELECT coalesce(array_agg(p.queue), '{}') AS queues FROM cellgate_jobs_paused p) q
    -- (OFFSET 0: c stays a subquery, so its EXISTS runs once.)
    CROSS JOIN (SELECT EXISTS (SELECT 1 FROM cellgate_jobs_tenant_limits l WHERE l.max_running > 0) AS tcaps
                OFFSET 0) c
    CROSS JOIN LATERAL (
        SELECT array_agg(r.tenant) AS tenants
        FROM (SELECT j.tenant, count(*) AS n FROM cellgate_jobs j
              WHERE c.tcaps AND j.state = 'running' AND j.attempt > 0 AND j.tenant <> ''
              GROUP BY j.tenant) r
        JOIN cellgate_jobs_tenant_limits l ON l.tenant = r.tenant
        WHERE l.max_running > 0 AND r.n >= l.max_running) f;

    IF cardinality(p_cap_kinds) = 0 AND NOT v_tcaps AND NOT v_prio THEN
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
                      WHERE j.state = 'available' AND j.queue IS NOT NULL AND NOT j.held AND j.run_at <= p_now
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
               array_agg(s.priority ORDER BY s.vtime, s.id), array_agg(s.vtime ORDER BY s.vtime, s.id),
               CASE WHEN v_tcaps THEN coalesce(array_agg(DISTINCT s.tenant) FILTER (
                   WHERE EXISTS (SELECT 1 FROM cellgate_jobs_tenant_limits l
                                 WHERE l.tenant = s.tenant AND l.max_running > 0)), '{}') END
        INTO v_ids, v_tids, v_kinds, v_tenants, v_prios, v_vtimes, v_capped
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.priority, j.vtime FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.vtime IS NOT NULL
                AND j.queue <> ALL (v_paused)
              ORDER BY j.vtime, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSIF p_fair THEN
        IF cardinality(v_full) = 0 THEN
            -- Only tenants at their caps, which hold at most
            -- greatest(max_running, 32) places each (held jobs): the scan
            -- steps over no more than those, however many tenants are at
            -- their caps, so no window. A window (the next p_lookahead
            -- places) would be all theirs once they hold more places
            -- together, and the claim would take nothing until one of
            -- their jobs ended: tenants at their caps would stop everyone.
            v_horizon := 9223372036854775807;
        ELSE
            -- The window's last place, read once: a window in an IN (...)
            -- subquery may be planned as a semi join that reads it again
            -- for every row.
            SELECT max(x.vtime) INTO v_horizon
            FROM (SELECT w.vtime FROM cellgate_jobs w
                  WHERE w.state = 'available' AND w.vtime IS NOT NULL
                    AND w.queue <> ALL (v_paused)
                  ORDER BY w.vtime, w.id
                  LIMIT p_lookahead) x;
        END IF;
        SELECT array_agg(s.id ORDER BY s.vtime, s.id), array_agg(s.ctid ORDER BY s.vtime, s.id),
               array_agg(s.kind ORDER BY s.vtime, s.id), array_agg(s.tenant ORDER BY s.vtime, s.id),
               array_agg(s.priority ORDER BY s.vtime, s.id), array_agg(s.vtime ORDER BY s.vtime, s.id),
               CASE WHEN v_tcaps THEN coalesce(array_agg(DISTINCT s.tenant) FILTER (
                   WHERE EXISTS (SELECT 1 FROM cellgate_jobs_tenant_limits l
                                 WHERE l.tenant = s.tenant AND l.max_running > 0)), '{}') END
        INTO v_ids, v_tids, v_kinds, v_tenants, v_prios, v_vtimes, v_capped
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
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND NOT j.held AND j.run_at <= p_now
                AND j.queue <> ALL (v_paused)
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;
    ELSE
        IF cardinality(v_full) = 0 THEN
            -- Only tenants at their caps: as in the fair order, their
            -- jobs past their quotas are held, out of the FIFO index, so
            -- the scan steps over at most their quotas: no window.
            v_horizon_at := p_now;
        ELSE
            SELECT max(x.run_at) INTO v_horizon_at
            FROM (SELECT w.run_at FROM cellgate_jobs w
                  WHERE w.state = 'available' AND w.queue IS NOT NULL AND NOT w.held AND w.run_at <= p_now
                    AND w.queue <> ALL (v_paused)
                  ORDER BY w.run_at, w.id
                  LIMIT p_lookahead) x;
        END IF;
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id), array_agg(s.tenant ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds, v_tenants
        FROM (SELECT j.id, j.ctid, j.kind, j.tenant, j.run_at FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND NOT j.held AND j.run_at <= v_horizon_at
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

    -- Tenants' caps: each capped tenant among the candidates is locked
    -- if its lock is free (pg_try_advisory_xact_lock: no wait, so no
    -- deadlock with the kinds' locks either); a tenant whose lock another
    -- claim holds is left out of this claim (that claim is taking its
    -- room), instead of this claim waiting for the other's commit with its
    -- candidates locked. Then one count, whose fresh snapshot sees every
    -- job claimed by the claims that held the locks before, keeps each
    -- locked tenant's first candidates up to its room.
    IF v_tcaps AND v_capped IS NULL THEN
        SELECT coalesce(array_agg(l.tenant), '{}') INTO v_capped
        FROM cellgate_jobs_tenant_limits l
        WHERE l.tenant = ANY (v_tenants) AND l.max_running > 0;
    END IF;
    v_capped := coalesce(v_capped, '{}');
    IF cardinality(v_capped) > 0 THEN
        SELECT coalesce(array_agg(k.tenant) FILTER (WHERE NOT k.got), '{}') INTO v_busy
        FROM (SELECT c.tenant, pg_try_advisory_xact_lock(1667723884, hashtext(c.tenant)) AS got
              FROM unnest(v_capped) AS c(tenant)) k;
        SELECT array_agg(CASE WHEN x.keep THEN x.id END ORDER BY x.i),
               array_agg(CASE WHEN x.keep THEN x.tid END ORDER BY x.i)
        INTO v_ids, v_tids
        FROM (SELECT c.i, c.id, c.tid,
                     l.max_running IS NULL
                     OR (c.tenant <> ALL (v_busy)
                         AND row_number() OVER (PARTITION BY c.tenant, c.id IS NULL ORDER BY c.i)
                             <= l.max_running - coalesce(r.n, 0)) AS keep
              FROM unnest(v_ids, v_tids, v_tenants) WITH ORDINALITY AS c(id, tid, tenant, i)
              LEFT JOIN cellgate_jobs_tenant_limits l ON l.tenant = c.tenant AND l.max_running > 0
              LEFT JOIN (SELECT j.tenant, count(*) AS n FROM cellgate_jobs j
                         WHERE j.state = 'running' AND j.attempt > 0 AND j.tenant <> ''
                           AND j.tenant = ANY (v_capped)
                         GROUP BY j.tenant) r ON r.tenant = c.tenant) x;
    END IF;

    -- One statement claims the jobs kept, moves the displaced jobs to the
    -- places of the jobs claimed in their stead (only those claimed), and
    -- raises the head to the highest place claimed: the candidates' places
    -- (a job claimed in another's place took that place). The head's row
    -- is every fair claim's: the data-modifying CTEs run after the main
    -- UPDATE, so a concurrent claim waits for it from there to this
    -- claim's commit.
    RETURN QUERY
    WITH moved AS (
        UPDATE cellgate_jobs j SET vtime = m.vtime
        FROM unnest(v_mv_tids, v_mv_vt, v_mv_for) AS m(tid, vtime, bid)
        WHERE j.ctid = m.tid AND m.bid = ANY (v_ids)),
    head AS (
        UPDATE cellgate_jobs_head hd SET vtime = m.vtime
        FROM (SELECT max(u.vtime) AS vtime FROM unnest(v_ids, v_vtimes) AS u(id, vtime)
              WHERE u.id IS NOT NULL) m
        WHERE p_fair AND m.vtime > hd.vtime)
    UPDATE cellgate_jobs j
    SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
        heartbeat_at = p_now, claimed_by = p_claimed_by
    WHERE j.ctid = ANY (v_tids)
    RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
              array_position(v_ids, j.id);

    -- The capped tenants that had a job claimed take places for their
    -- next held jobs (a new statement: it sees the claimed jobs running).
    -- (Two IFs: a condition holding a subquery is a statement of its own,
    -- which the claims without capped candidates skip.)
    IF cardinality(v_capped) > 0 THEN
        IF EXISTS (SELECT 1 FROM cellgate_jobs h WHERE h.state = 'available' AND h.held) THEN
            PERFORM cellgate_jobs_refill(r.tenants, CASE WHEN p_fair THEN r.counts END, p_now)
            FROM (SELECT array_agg(c.tenant) AS tenants, array_agg(c.n)::integer[] AS counts
                  FROM (SELECT u.tenant, count(*) AS n FROM unnest(v_ids, v_tenants) AS u(id, tenant)
                        WHERE u.id IS NOT NULL AND u.tenant = ANY (v_capped)
                        GROUP BY u.tenant) c) r
            WHERE r.tenants IS NOT NULL;
        END IF;
    END IF;
END;
$$;
