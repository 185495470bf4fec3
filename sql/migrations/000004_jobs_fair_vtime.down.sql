-- Back to 000003: the round-robin walk over cellgate_jobs_fair_idx. The
-- functions are restored as 000002 and 000003 defined them.
DROP FUNCTION cellgate_jobs_claim(timestamptz, integer, boolean, text[], integer[], integer, text, bigint[], integer[], integer);
DROP FUNCTION cellgate_jobs_insert_many(text[], text[], text[], text[], integer[], timestamptz[], timestamptz);

-- cellgate_jobs_insert as 000002 made it (without places), before the
-- function it called is dropped.
CREATE OR REPLACE FUNCTION cellgate_jobs_insert(
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
BEGIN
    LOOP
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, unique_key, run_at, created_at)
        VALUES (p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_unique_key, p_run_at, p_now)
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

DROP FUNCTION cellgate_jobs_vtimes(text[], timestamptz[], timestamptz);
DROP TABLE cellgate_jobs_head;

CREATE INDEX cellgate_jobs_fair_idx ON cellgate_jobs (tenant, run_at, id)
    WHERE state = 'available' AND tenant IS NOT NULL;
DROP INDEX cellgate_jobs_unplaced_idx;
DROP INDEX cellgate_jobs_tenant_vtime_idx;
DROP INDEX cellgate_jobs_vtime_idx;
ALTER TABLE cellgate_jobs DROP COLUMN vtime;

-- cellgate_jobs_claim claims up to p_limit ready jobs in one round trip and
-- returns them with their hand-out order (job_ord). It first completes the
-- jobs p_done (at attempts p_done_att), the caller's buffered completions.
--
-- FIFO (p_fair = false): the oldest ready jobs by (run_at, id).
-- Fair (p_fair = true): tenants with a ready job, round-robin in byte order
-- after p_cursor (the tenant the caller served last; NULL = from the
-- start), each tenant's oldest jobs first, at most p_quantum jobs per tenant
-- per turn: when the turns reach p_limit jobs before the ring wraps, the
-- batch is the next tenants' oldest p_quantum jobs each; with fewer ready
-- tenants, each gives an equal share, handed out round by round (every
-- tenant's first job, then every tenant's second, ...).
--
-- p_cap_kinds/p_caps are the caller's per-kind concurrency caps. Kinds at
-- their cap are skipped; the jobs of a capped kind that are claimed are
-- recounted under a per-kind advisory lock (class 1667723883), so
-- concurrent claimers never exceed the cap. A job behind more than
-- p_lookahead jobs of kinds at their cap (in FIFO order, or in its tenant's
-- line) waits until one of them has room. A row with job_id 0 claims
-- nothing: it moves the fair cursor to the tenant in job_tenant, past
-- tenants whose ready jobs are all held by caps or were taken by a
-- concurrent claimer (see below).
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
    p_done_att   integer[],
    p_quantum    integer
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
    v_n          integer;
    i            integer;
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

    IF cardinality(p_cap_kinds) > 0 THEN
        SELECT coalesce(array_agg(c.kind), '{}') INTO v_full
        FROM unnest(p_cap_kinds, p_caps) AS c(kind, cap)
        WHERE (SELECT count(*) FROM cellgate_jobs j
               WHERE j.state = 'running' AND j.attempt > 0 AND j.kind = c.kind) >= c.cap;
    END IF;

    IF NOT p_fair AND cardinality(p_cap_kinds) = 0 THEN
        -- No caps: lock and claim in one statement. The locked rows keep
        -- their addresses until commit, so the update finds them by TID.
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
        RETURN;

    ELSIF NOT p_fair AND cardinality(v_full) = 0 THEN
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
        -- the start up to the cursor: one descent per turn, which finds the
        -- next tenant and its oldest ready jobs at once (the index is
        -- ordered by tenant, run_at, id), by their row addresses (ctid). A
        -- turn reads up to p_quantum entries from where it lands; if the
        -- tenant has fewer ready jobs, the turn goes on into the next
        -- tenant's, and the next turn starts after the last tenant read.
        -- In byte order, tenant > c  <=>  tenant >= c || chr(1).
        v_from := coalesce(p_cursor || chr(1), '');
        WITH RECURSIVE after_c(last, tenants, tids, n) AS (
            (SELECT max(s.tenant), array_agg(s.tenant), array_agg(s.ctid), count(*)::integer
             FROM (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                   WHERE j.state = 'available' AND j.tenant >= v_from AND j.run_at <= p_now
                   ORDER BY j.tenant, j.run_at, j.id LIMIT p_quantum) s
             HAVING count(*) > 0)
            UNION ALL
            SELECT x.last, x.tenants, x.tids, a.n + x.c FROM after_c a
            CROSS JOIN LATERAL (
                SELECT max(s.tenant) AS last, array_agg(s.tenant) AS tenants, array_agg(s.ctid) AS tids,
                       count(*)::integer AS c
                FROM (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                      WHERE j.state = 'available' AND j.tenant > a.last AND j.run_at <= p_now
                      ORDER BY j.tenant, j.run_at, j.id LIMIT p_quantum) s
                HAVING count(*) > 0) x
            WHERE a.n < p_limit
        ), after_n(n) AS (
            SELECT coalesce(max(a.n), 0) FROM after_c a
        ), before_c(last, tenants, tids, n) AS (
            -- Only when the walk to the end found too few jobs.
            (SELECT max(s.tenant), array_agg(s.tenant), array_agg(s.ctid), (SELECT n FROM after_n) + count(*)::integer
             FROM (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                   WHERE j.state = 'available' AND j.tenant < v_from AND j.run_at <= p_now
                     AND (SELECT n FROM after_n) < p_limit
                   ORDER BY j.tenant, j.run_at, j.id LIMIT p_quantum) s
             HAVING count(*) > 0)
            UNION ALL
            SELECT x.last, x.tenants, x.tids, b.n + x.c FROM before_c b
            CROSS JOIN LATERAL (
                SELECT max(s.tenant) AS last, array_agg(s.tenant) AS tenants, array_agg(s.ctid) AS tids,
                       count(*)::integer AS c
                FROM (SELECT j.tenant, j.ctid FROM cellgate_jobs j
                      WHERE j.state = 'available' AND j.tenant > b.last AND j.tenant < v_from
                        AND j.run_at <= p_now
                      ORDER BY j.tenant, j.run_at, j.id LIMIT p_quantum) s
                HAVING count(*) > 0) x
            WHERE b.n < p_limit
        )
        -- The entries of a turn are in index order (each array_agg reads a
        -- LIMIT over an ordered index scan); the turns in walk order.
        SELECT coalesce(array_agg(u.tenant ORDER BY r.part, r.n, u.o), '{}'),
               coalesce(array_agg(u.tid ORDER BY r.part, r.n, u.o), '{}')
        INTO v_tenants, v_first
        FROM (SELECT a.tenants, a.tids, 1 AS part, a.n FROM after_c a
              UNION ALL
              SELECT b.tenants, b.tids, 2, b.n FROM before_c b) r
        CROSS JOIN LATERAL unnest(r.tenants, r.tids) WITH ORDINALITY AS u(tenant, tid, o);
        v_tenants := v_tenants[1:p_limit];
        v_first := v_first[1:p_limit];

        IF cardinality(v_tenants) = 0 THEN
            RETURN;
        END IF;
        IF cardinality(v_tenants) >= p_limit AND cardinality(p_cap_kinds) = 0 THEN
            -- No caps: lock the jobs the walk found by their address and
            -- claim them in one statement (see the branch below). A job
            -- that a concurrent claimer (another process) took or holds is
            -- not replaced: that tenant's turn went to the other claimer.
            -- Then a hint row moves the caller's cursor to the end of the
            -- walk, so the next claim goes on from there.
            RETURN QUERY
            WITH locked AS MATERIALIZED (
                SELECT l.ctid AS tid, f.pos::integer AS pos
                FROM unnest(v_first) WITH ORDINALITY AS f(tid, pos)
                CROSS JOIN LATERAL (SELECT x.ctid, x.state, x.run_at FROM cellgate_jobs x
                                    WHERE x.ctid = f.tid
                                    LIMIT 1
                                    FOR UPDATE SKIP LOCKED) l
                WHERE l.state = 'available' AND l.run_at <= p_now)
            UPDATE cellgate_jobs j
            SET state = 'running', attempt = j.attempt + 1, attempted_at = p_now,
                heartbeat_at = p_now, claimed_by = p_claimed_by
            FROM locked
            WHERE j.ctid = locked.tid
            RETURNING j.id, j.kind, j.queue, j.tenant::text, j.args, j.attempt, j.max_attempts, j.created_at,
                      locked.pos;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            IF v_n < cardinality(v_first) THEN
                job_id := 0;
                job_kind := '';
                job_queue := '';
                job_tenant := v_tenants[cardinality(v_tenants)];
                job_args := 'null';
                job_attempt := 0;
                job_max_attempts := 0;
                job_created_at := p_now;
                job_ord := 0;
                RETURN NEXT;
            END IF;
            RETURN;
        ELSIF cardinality(v_tenants) >= p_limit THEN
            -- The oldest jobs the walk found, up to p_quantum per tenant.
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
                -- Jobs a concurrent claimer took or holds: their tenants'
                -- next jobs that nobody holds, and that this claim has not
                -- locked already (one descent per tenant; a row locked by
                -- this transaction is not skipped, so exclude it).
                SELECT coalesce(v_ids, '{}') || coalesce(array_agg(l.id ORDER BY g.poss[l.k]), '{}'),
                       coalesce(v_tids, '{}') || coalesce(array_agg(l.ctid ORDER BY g.poss[l.k]), '{}'),
                       coalesce(v_kinds, '{}') || coalesce(array_agg(l.kind ORDER BY g.poss[l.k]), '{}'),
                       coalesce(v_pos, '{}') || coalesce(array_agg(g.poss[l.k] ORDER BY g.poss[l.k]), '{}')
                INTO v_ids, v_tids, v_kinds, v_pos
                FROM (SELECT t.tenant, array_agg(t.pos::integer ORDER BY t.pos) AS poss
                      FROM unnest(v_tenants) WITH ORDINALITY AS t(tenant, pos)
                      WHERE NOT (t.pos::integer = ANY (coalesce(v_pos, '{}')))
                      GROUP BY t.tenant) g
                CROSS JOIN LATERAL (
                    SELECT x.id, x.ctid, x.kind, (row_number() OVER ())::integer AS k
                    FROM (SELECT j.id, j.ctid, j.kind FROM cellgate_jobs j
                          WHERE j.state = 'available' AND j.tenant = g.tenant AND j.run_at <= p_now
                            AND NOT (j.ctid = ANY (coalesce(v_tids, '{}')))
                          ORDER BY j.run_at, j.id
                          LIMIT cardinality(g.poss)
                          FOR UPDATE SKIP LOCKED) x) l;
                -- Back into ring order.
                SELECT array_agg(u.id ORDER BY u.pos), array_agg(u.tid ORDER BY u.pos), array_agg(u.kind ORDER BY u.pos)
                INTO v_ids, v_tids, v_kinds
                FROM unnest(v_ids, v_tids, v_kinds, v_pos) AS u(id, tid, kind, pos);
            END IF;
        ELSE
            -- Fewer ready jobs in one turn of the ring than the batch: an
            -- equal share of each tenant (a turn's tenants are adjacent).
            SELECT array_agg(u.tenant ORDER BY u.pos) INTO v_tenants
            FROM unnest(v_tenants) WITH ORDINALITY AS u(tenant, pos)
            WHERE u.pos = 1 OR u.tenant <> v_tenants[u.pos - 1];
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
