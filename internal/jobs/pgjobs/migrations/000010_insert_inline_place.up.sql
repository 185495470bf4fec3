-- A job without a uniqueness key is inserted by one statement that places
-- it itself, without ON CONFLICT.
--
-- cellgate_jobs_insert is the transactional enqueue's statement (a sign-up
-- writes its row and its job in one transaction), so its cost is paid per
-- job. In 000008 it called cellgate_jobs_places (a second plpgsql call, and
-- a query built for a batch: unnest, a window, a sort) and inserted with
-- ON CONFLICT DO NOTHING, which PostgreSQL carries out as a speculative
-- insertion (an arbiter check and one more WAL record per row) even when
-- the key is NULL and no conflict can arise. A job with a key keeps that
-- path: it needs the conflict check.
--
-- The placement below is cellgate_jobs_places (000008) for one job: a due
-- job goes one step (720720 / weight) after the later of its tenant's last
-- place and the head; a job of a capped tenant is held when that place is
-- beyond its quota of steps after the head, or when the tenant has held
-- jobs already; a job scheduled for later gets no place. The two must say
-- the same: a change to one is a change to both.
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
              FROM (SELECT coalesce((SELECT hd.vtime FROM cellgate_jobs_head hd), 0) AS head) h
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
                         END AS place) pl) r
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
