-- cellgate_jobs_insert, as in 000010 (its comment says what it does), and
-- cellgate_jobs_places, as in 000008, with their placing subqueries kept
-- from being pulled up into the statement that uses them.
--
-- The planner flattened them, and every place an expression of one was
-- used got a copy of it, with the subplans inside: the generic plan had
-- thirteen InitPlans (the head read eight times, the tenant's last place
-- three times, the held jobs twice) for the three it needs. PostgreSQL
-- initializes every subplan of a plan at each execution, run or not, so a
-- transactional enqueue paid for ten index and table scans it never ran:
-- about 13 µs of the function's 78 µs per call, measured in one session
-- (20,000 calls in a DO block). cellgate_jobs_places (a batch's places:
-- the coalesced and bulk enqueues, the jobs coming due) read the head four
-- times. OFFSET 0 keeps a subquery from being pulled up; each lookup is
-- planned, and initialized, once. The order, the places and the held
-- jobs are those of 000010 and 000008 (TestStatementsScanEachLookupOnce).
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
    v_vtime bigint;
BEGIN
    duplicate := false;
    IF p_unique_key IS NULL THEN
        -- The CASEs keep a scheduled job, or a tenant without a cap, from
        -- reading what it does not need (a subquery in a CASE branch runs
        -- only when the branch is taken).
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, run_at, created_at, vtime, held, priority)
        SELECT p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_run_at, p_now,
               CASE WHEN NOT r.held THEN r.place END, coalesce(r.held, false), p_priority
        FROM (SELECT pl.place,
                     CASE WHEN p_run_at > p_now THEN NULL
                          WHEN s.quota IS NULL THEN false
                          WHEN pl.place > h.head + s.quota * s.step THEN true
                          ELSE EXISTS (SELECT 1 FROM cellgate_jobs y
                                       WHERE y.state = 'available' AND y.held AND y.tenant = p_tenant)
                     END AS held
              -- OFFSET 0 (here, on pl and on r): each subquery planned once,
              -- not copied into every use of its columns (migration 000011).
              FROM (SELECT coalesce((SELECT hd.vtime FROM cellgate_jobs_head hd), 0) AS head OFFSET 0) h
              LEFT JOIN (SELECT greatest(720720 / lim.weight, 1)::bigint AS step,
                                CASE WHEN lim.max_running > 0 THEN greatest(lim.max_running, 32) END AS quota
                         FROM cellgate_jobs_tenant_limits lim
                         WHERE lim.tenant = p_tenant) s ON true
              -- vtime > head bounds the backward scan, as in 000001.
              CROSS JOIN LATERAL (
                  SELECT CASE WHEN p_run_at <= p_now
                              THEN greatest(coalesce((SELECT x.vtime FROM cellgate_jobs x
                                                      WHERE x.state = 'available' AND x.vtime IS NOT NULL
                                                        AND x.tenant = p_tenant AND x.vtime > h.head
                                                      ORDER BY x.vtime DESC
                                                      LIMIT 1), 0), h.head) + coalesce(s.step, 720720)
                         END AS place OFFSET 0) pl OFFSET 0) r
        RETURNING id INTO job_id;
        RETURN;
    END IF;
    v_vtime := (cellgate_jobs_places(ARRAY[p_tenant], ARRAY[p_run_at], p_now))[1];
    LOOP
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, unique_key, run_at, created_at, vtime, held, priority)
        VALUES (p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_unique_key, p_run_at, p_now,
                nullif(v_vtime, 0), coalesce(v_vtime = 0, false), p_priority)
        ON CONFLICT (kind, tenant, unique_key)
            WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
            DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
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

-- cellgate_jobs_places, as in 000008, with the head read once.
CREATE OR REPLACE FUNCTION cellgate_jobs_places(
    p_tenants text[],
    p_run_ats timestamptz[],
    p_now     timestamptz
) RETURNS bigint[] LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_out bigint[];
BEGIN
    SELECT array_agg(CASE WHEN NOT u.ready THEN NULL
                          WHEN r.held THEN 0
                          ELSE p.place
                     END ORDER BY u.o)
    INTO v_out
    -- OFFSET 0: the head read once, not copied into every use of h.head
    -- (migration 000011).
    FROM (SELECT coalesce((SELECT hd.vtime FROM cellgate_jobs_head hd), 0) AS head OFFSET 0) h
    CROSS JOIN (SELECT t.tenant, t.run_at <= p_now AS ready, t.o,
                       count(*) FILTER (WHERE t.run_at <= p_now) OVER (PARTITION BY t.tenant ORDER BY t.o) - 1 AS k
                FROM unnest(p_tenants, p_run_ats) WITH ORDINALITY AS t(tenant, run_at, o)) u
    LEFT JOIN LATERAL (SELECT greatest(720720 / lim.weight, 1)::bigint AS step,
                              CASE WHEN lim.max_running > 0 THEN greatest(lim.max_running, 32) END AS quota
                       FROM cellgate_jobs_tenant_limits lim
                       WHERE lim.tenant = u.tenant) s ON u.ready
    -- vtime > head bounds the backward scan, as in 000001.
    LEFT JOIN LATERAL (SELECT x.vtime AS last FROM cellgate_jobs x
                       WHERE x.state = 'available' AND x.vtime IS NOT NULL AND x.tenant = u.tenant
                         AND x.vtime > h.head
                       ORDER BY x.vtime DESC
                       LIMIT 1) l ON u.ready
    CROSS JOIN LATERAL (SELECT greatest(coalesce(l.last, 0), h.head) + (u.k + 1) * coalesce(s.step, 720720) AS place) p
    -- The CASE keeps a tenant without a cap, or over its quota, from
    -- reading anything here (a LEFT JOIN's condition does not stop a
    -- lateral subquery running).
    CROSS JOIN LATERAL (SELECT CASE WHEN s.quota IS NULL THEN false
                                    WHEN p.place > h.head + s.quota * s.step THEN true
                                    ELSE EXISTS (SELECT 1 FROM cellgate_jobs y
                                                 WHERE y.state = 'available' AND y.held AND y.tenant = u.tenant)
                               END AS held) r;
    RETURN v_out;
END;
$$;
