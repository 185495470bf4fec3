-- Undoes 000010_insert_inline_place.up.sql: cellgate_jobs_insert as
-- 000008_capped_places.up.sql made it (byte for byte:
-- TestMigrationDownOneStep compares the catalogs).
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
    v_vtime bigint := (cellgate_jobs_places(ARRAY[p_tenant], ARRAY[p_run_at], p_now))[1];
BEGIN
    LOOP
        INSERT INTO cellgate_jobs (kind, queue, tenant, args, max_attempts, unique_key, run_at, created_at, vtime, held, priority)
        VALUES (p_kind, p_queue, p_tenant, p_args, p_max_attempts, p_unique_key, p_run_at, p_now,
                nullif(v_vtime, 0), coalesce(v_vtime = 0, false), p_priority)
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
