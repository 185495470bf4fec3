DROP FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text, text[], integer[], integer, text, bigint[], integer[], integer);

-- cellgate_jobs_claim claims up to p_limit ready jobs in one round trip and
-- returns them with their hand-out order (job_ord). It first completes the
-- jobs p_done (at attempts p_done_att), the caller's buffered completions.
--
-- FIFO (p_fair = false): the oldest ready jobs by (run_at, id).
-- Fair (p_fair = true): tenants with a ready job, round-robin in byte order
-- after p_cursor (the tenant the caller served last; NULL = from the
-- start), each tenant's oldest job first, one job per tenant per round:
-- with at least p_limit such tenants the batch is the next p_limit tenants'
-- oldest jobs; with fewer, each gives an equal share, handed out round by
-- round (every tenant's first job, then every tenant's second, ...).
--
-- p_cap_kinds/p_caps are the caller's per-kind concurrency caps. Kinds at
-- their cap are skipped; the jobs of a capped kind that are claimed are
-- recounted under a per-kind advisory lock (class 1667723883), so
-- concurrent claimers never exceed the cap. A job behind more than
-- p_lookahead jobs of kinds at their cap (in FIFO order, or in its tenant's
-- line) waits until one of them has room. A row with job_id 0 claims
-- nothing: it moves the fair cursor past tenants whose ready jobs are all
-- held by caps (see below).
CREATE FUNCTION cellgate_jobs_claim(
    p_now        timestamptz,
    p_limit      integer,
    p_fair       boolean,
    p_cursor     text,
    p_cap_kinds  text[],
    p_caps       integer[],
    p_lookahead  integer,
    p_claimed_by text,
    p_done       bigint[],
    p_done_att   integer[]
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
    v_full       text[] := '{}';
    v_ids        bigint[];
    v_tids       tid[];
    v_kinds      text[];
    v_tenants    text[] := '{}';
    v_first      tid[] := '{}';
    v_pos        integer[];
    v_from       text;
    v_t          text;
    v_next       text;
    v_wrapped    boolean := false;
    v_probes     integer := 0;
    v_max_probes integer := 4 * p_limit + 16;
    v_hint       text;
    v_per        integer;
    v_kind       text;
    v_room       integer;
    i            integer;
BEGIN
    -- A claim lost in a crash is rescued and the job runs again, so the
    -- claim need not wait for its WAL flush.
    PERFORM set_config('synchronous_commit', 'off', true);

    -- The caller's buffered completions ride along: they free capacity of
    -- capped kinds before it is counted.
    IF cardinality(p_done) > 0 THEN
        PERFORM cellgate_jobs_complete(p_done, p_done_att, p_now);
    END IF;

    IF cardinality(p_cap_kinds) > 0 THEN
        SELECT coalesce(array_agg(c.kind), '{}') INTO v_full
        FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
        WHERE (SELECT count(*) FROM cellgate_jobs j
               WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = c.kind) >= c.cap;
    END IF;

    IF NOT p_fair AND cardinality(v_full) = 0 THEN
        SELECT array_agg(s.id ORDER BY s.run_at, s.id), array_agg(s.ctid ORDER BY s.run_at, s.id),
               array_agg(s.kind ORDER BY s.run_at, s.id)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT j.id, j.ctid, j.kind, j.run_at FROM cellgate_jobs j
              WHERE j.state = 'available' AND j.queue IS NOT NULL AND j.run_at <= p_now
              ORDER BY j.run_at, j.id
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED) s;

    ELSIF NOT p_fair THEN
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

    ELSIF cardinality(v_full) = 0 THEN
        -- Walk cellgate_jobs_fair_idx from the cursor to the end, then from
        -- the start up to the cursor: one descent per tenant, which finds
        -- the tenant and its oldest ready job at once (the index is ordered
        -- by tenant, run_at, id), by its row address (ctid). In byte order,
        -- tenant > c  <=>  tenant >= c || chr(1).
        v_from := coalesce(p_cursor || chr(1), '');
        WITH RECURSIVE after_c(tenant, tid, n) AS (
            (SELECT j.tenant, j.ctid, 1 FROM cellgate_jobs j
             WHERE j.state = 'available' AND j.tenant >= v_from AND j.run_at <= p_now
             ORDER BY j.tenant, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT x.tenant, x.ctid, a.n + 1 FROM after_c a
            CROSS JOIN LATERAL (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                                WHERE j.state = 'available' AND j.tenant > a.tenant AND j.run_at <= p_now
                                ORDER BY j.tenant, j.run_at, j.id LIMIT 1) x
            WHERE a.n < p_limit
        ), before_c(tenant, tid, n) AS (
            (SELECT j.tenant, j.ctid, 1 FROM cellgate_jobs j
             WHERE j.state = 'available' AND j.tenant < v_from AND j.run_at <= p_now
             ORDER BY j.tenant, j.run_at, j.id LIMIT 1)
            UNION ALL
            SELECT x.tenant, x.ctid, b.n + 1 FROM before_c b
            CROSS JOIN LATERAL (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                                WHERE j.state = 'available' AND j.tenant > b.tenant AND j.tenant < v_from
                                  AND j.run_at <= p_now
                                ORDER BY j.tenant, j.run_at, j.id LIMIT 1) x
            WHERE b.n < p_limit
        )
        -- No ORDER BY under the LIMIT: the Append reads after_c first and
        -- stops as soon as it has p_limit tenants, so before_c is walked
        -- only when the ring wraps. array_agg restores the order.
        SELECT coalesce(array_agg(r.tenant ORDER BY r.part, r.n), '{}'),
               coalesce(array_agg(r.tid ORDER BY r.part, r.n), '{}')
        INTO v_tenants, v_first
        FROM (SELECT a.tenant, a.tid, 1 AS part, a.n FROM after_c a
              UNION ALL
              SELECT b.tenant, b.tid, 2, b.n FROM before_c b
              LIMIT p_limit) r;

        IF cardinality(v_tenants) = 0 THEN
            RETURN;
        END IF;
        IF cardinality(v_tenants) >= p_limit THEN
            -- One job per tenant: the oldest jobs the walk found. A job
            -- another claimer holds is skipped; its tenant waits a round.
            -- Lock those rows by their address (a TID scan: no index
            -- descent), and keep the ones still available. A row updated
            -- since the walk has a new address and fails the ctid test
            -- after the lock; a row another claimer holds is skipped.
            -- LIMIT 1 keeps the state test out of the lock (no qual is
            -- pushed into a subquery with a LIMIT).
            SELECT array_agg(j.id ORDER BY f.pos), array_agg(j.ctid ORDER BY f.pos),
                   array_agg(j.kind ORDER BY f.pos), array_agg(f.pos::integer ORDER BY f.pos)
            INTO v_ids, v_tids, v_kinds, v_pos
            FROM unnest(v_first) WITH ORDINALITY AS f(tid, pos)
            CROSS JOIN LATERAL (SELECT l.id, l.ctid, l.kind, l.state, l.run_at FROM cellgate_jobs l
                                WHERE l.ctid = f.tid
                                LIMIT 1
                                FOR UPDATE SKIP LOCKED) j
            WHERE j.state = 'available' AND j.run_at <= p_now;
            IF coalesce(cardinality(v_ids), 0) < cardinality(v_first) THEN
                -- Tenants whose oldest job a concurrent claimer took or
                -- holds: their next job nobody holds (one descent each).
                SELECT coalesce(v_ids, '{}') || coalesce(array_agg(l.id ORDER BY t.pos), '{}'),
                       coalesce(v_tids, '{}') || coalesce(array_agg(l.ctid ORDER BY t.pos), '{}'),
                       coalesce(v_kinds, '{}') || coalesce(array_agg(l.kind ORDER BY t.pos), '{}'),
                       coalesce(v_pos, '{}') || coalesce(array_agg(t.pos::integer ORDER BY t.pos), '{}')
                INTO v_ids, v_tids, v_kinds, v_pos
                FROM unnest(v_tenants) WITH ORDINALITY AS t(tenant, pos)
                CROSS JOIN LATERAL (SELECT j.id, j.ctid, j.kind FROM cellgate_jobs j
                                    WHERE j.state = 'available' AND j.tenant = t.tenant AND j.run_at <= p_now
                                    ORDER BY j.run_at, j.id
                                    LIMIT 1
                                    FOR UPDATE SKIP LOCKED) l
                WHERE NOT (t.pos::integer = ANY (coalesce(v_pos, '{}')));
                -- Back into ring order.
                SELECT array_agg(u.id ORDER BY u.pos), array_agg(u.tid ORDER BY u.pos), array_agg(u.kind ORDER BY u.pos)
                INTO v_ids, v_tids, v_kinds
                FROM unnest(v_ids, v_tids, v_kinds, v_pos) AS u(id, tid, kind, pos);
            END IF;
        ELSE
            -- Fewer tenants than the batch: an equal share of each.
            v_per := (p_limit + cardinality(v_tenants) - 1) / cardinality(v_tenants);
            SELECT array_agg(x.id ORDER BY x.rn, x.pos), array_agg(x.ctid ORDER BY x.rn, x.pos),
                   array_agg(x.kind ORDER BY x.rn, x.pos)
            INTO v_ids, v_tids, v_kinds
            FROM (SELECT c.id, c.ctid, c.kind, c.rn, t.pos
                  FROM unnest(v_tenants) WITH ORDINALITY AS t(tenant, pos)
                  CROSS JOIN LATERAL (
                      SELECT l.id, l.ctid, l.kind, row_number() OVER (ORDER BY l.run_at, l.id) AS rn
                      FROM (SELECT j.id, j.ctid, j.kind, j.run_at FROM cellgate_jobs j
                            WHERE j.state = 'available' AND j.tenant = t.tenant AND j.run_at <= p_now
                            ORDER BY j.run_at, j.id
                            LIMIT v_per
                            FOR UPDATE SKIP LOCKED) l) c
                  ORDER BY c.rn, t.pos
                  LIMIT p_limit) x;
        END IF;

    ELSE
        -- Fair, with kinds at their cap: walk tenant by tenant, passing over
        -- a tenant whose next p_lookahead jobs are all of such kinds. The
        -- walk stops after v_max_probes tenants: if that leaves the batch
        -- empty, a hint row (job_id 0, job_tenant = the last tenant looked
        -- at) tells the caller where to go on from.
        v_t := p_cursor;
        WHILE cardinality(v_tenants) < p_limit LOOP
            IF v_t IS NULL THEN
                SELECT j.tenant INTO v_next FROM cellgate_jobs j
                WHERE j.state = 'available' AND j.run_at <= p_now
                ORDER BY j.tenant
                LIMIT 1;
            ELSE
                SELECT j.tenant INTO v_next FROM cellgate_jobs j
                WHERE j.state = 'available' AND j.tenant > v_t AND j.run_at <= p_now
                ORDER BY j.tenant
                LIMIT 1;
            END IF;
            IF v_next IS NULL OR (v_wrapped AND v_next COLLATE "C" > p_cursor COLLATE "C") THEN
                EXIT WHEN v_wrapped OR p_cursor IS NULL;
                v_wrapped := true;
                v_t := NULL;
                CONTINUE;
            END IF;
            v_t := v_next;
            v_probes := v_probes + 1;
            PERFORM 1 FROM (SELECT w.kind FROM cellgate_jobs w
                            WHERE w.state = 'available' AND w.tenant = v_next AND w.run_at <= p_now
                            ORDER BY w.run_at, w.id
                            LIMIT p_lookahead) x
            WHERE x.kind <> ALL (v_full)
            LIMIT 1;
            IF FOUND THEN
                v_tenants := v_tenants || v_next;
            END IF;
            IF v_probes >= v_max_probes THEN
                v_hint := v_next;
                EXIT;
            END IF;
        END LOOP;

        IF cardinality(v_tenants) = 0 THEN
            IF v_hint IS NOT NULL THEN
                job_id := 0;
                job_kind := '';
                job_queue := '';
                job_tenant := v_hint;
                job_args := 'null';
                job_attempt := 0;
                job_max_attempts := 0;
                job_created_at := p_now;
                job_ord := 0;
                RETURN NEXT;
            END IF;
            RETURN;
        END IF;
        v_per := (p_limit + cardinality(v_tenants) - 1) / cardinality(v_tenants);
        SELECT array_agg(x.id ORDER BY x.rn, x.pos), array_agg(x.ctid ORDER BY x.rn, x.pos),
               array_agg(x.kind ORDER BY x.rn, x.pos)
        INTO v_ids, v_tids, v_kinds
        FROM (SELECT c.id, c.ctid, c.kind, c.rn, t.pos
              FROM unnest(v_tenants) WITH ORDINALITY AS t(tenant, pos)
              CROSS JOIN LATERAL (
                  SELECT l.id, l.ctid, l.kind, row_number() OVER (ORDER BY l.run_at, l.id) AS rn
                  FROM (SELECT j.id, j.ctid, j.kind, j.run_at FROM cellgate_jobs j
                        WHERE j.id IN (SELECT w.id FROM cellgate_jobs w
                                       WHERE w.state = 'available' AND w.tenant = t.tenant
                                         AND w.run_at <= p_now
                                       ORDER BY w.run_at, w.id
                                       LIMIT p_lookahead)
                          AND j.state = 'available' AND j.tenant = t.tenant AND j.run_at <= p_now
                          AND j.kind <> ALL (v_full)
                        ORDER BY j.run_at, j.id
                        LIMIT v_per
                        FOR UPDATE SKIP LOCKED) l) c
              ORDER BY c.rn, t.pos
              LIMIT p_limit) x;
    END IF;

    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    IF cardinality(p_cap_kinds) > 0 THEN
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
