-- The materialiser: due definitions in, cron runs out.

-- name: lock_due_definitions
-- Definitions whose next fire time falls before the horizon, earliest first. The
-- partial index definitions_due keeps this proportional to DUE jobs, not all jobs.
-- SKIP LOCKED: a definition being edited is simply picked up on the next pass.
SELECT tenant,
       name,
       next_due_at,
       queue,
       priority,
       spec -> 'schedule' ->> 'cron' AS cron,
       spec -> 'schedule' ->> 'timeZone' AS time_zone,
       (spec -> 'schedule' ->> 'jitterSeconds')::integer AS jitter_seconds,
       spec -> 'schedule' ->> 'missedRunPolicy' AS missed_run_policy,
       -- NULL: no choice made, the hour field's rule (core.cron.DstPolicy).
       spec -> 'schedule' -> 'dst' ->> 'repeated' AS dst_repeated,
       spec -> 'schedule' -> 'dst' ->> 'skipped' AS dst_skipped,
       -- bigint: a spec that did not come through the API may exceed an integer, and
       -- one failing cast here would stop every pass over the shard.
       (spec -> 'schedule' ->> 'startingDeadlineSeconds')::bigint
           AS starting_deadline_seconds,
       (spec ->> 'runAt') IS NOT NULL AS one_off,
       (spec -> 'retry' ->> 'maxAttempts')::integer AS max_attempts,
       (spec -> 'retry' ->> 'baseSeconds')::double precision AS retry_base,
       (spec -> 'retry' ->> 'maxSeconds')::double precision AS retry_max,
       (spec ->> 'timeoutSeconds')::integer AS timeout_seconds,
       -- > 0 for any flow control: a rate-limited run is claimed on the limited path.
       run_concurrency(spec) AS concurrency,
       coalesce((spec ->> 'dryRun')::boolean, false) AS dry_run,
       spec -> 'payload' AS payload,
       spec ->> 'overlapPolicy' AS overlap_policy
FROM definitions
WHERE NOT paused
  AND next_due_at IS NOT NULL
  AND next_due_at <= $1::timestamptz
ORDER BY next_due_at
LIMIT $2
FOR UPDATE SKIP LOCKED

-- name: insert_planned_runs
-- Each run first claims its keys in run_keys: (tenant, job, due_at) for cron runs and
-- the idempotency key. A run whose key is taken, by a live or by a finished run, is
-- left out, so materialising twice (failover, split brain) inserts nothing the second
-- time. A run already past its starting deadline goes straight to the history. $19: the
-- overlap policy of each run's job (NULL: Allow); such a run stays `scheduled` even when
-- its time has come, for the due flip to decide under the job's lock (sweeps.sql).
WITH clock AS (
    SELECT coalesce($18::timestamptz, now()) AS now
), planned AS (
    SELECT p.*, nextval('run_ids') AS id
    FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::text[],
                $6::integer[], $7::double precision[], $8::double precision[],
                $9::integer[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[],
                $13::text[], $14::jsonb[], $15::bigint[], $16::integer[], $17::boolean[],
                $19::text[])
         AS p(tenant, job, queue, priority, origin, max_attempts, retry_base, retry_max,
              timeout_seconds, due_at, ready_at, start_deadline, idempotency_key, payload,
              ordinal, concurrency, dry_run, overlap)
    ORDER BY p.ordinal
), claimed AS (
    INSERT INTO run_keys (tenant, job, due_at, idempotency_key, run_id, created_at)
    SELECT tenant, job, CASE WHEN origin = 'cron' THEN due_at END, idempotency_key, id,
           clock.now
    FROM planned, clock
    WHERE origin = 'cron' OR idempotency_key IS NOT NULL
    ORDER BY ordinal
    ON CONFLICT DO NOTHING
    RETURNING run_id
), admitted AS (
    SELECT planned.*,
           CASE WHEN planned.start_deadline < clock.now THEN 'skipped'
                WHEN planned.ready_at <= clock.now AND planned.overlap IS NULL THEN 'ready'
                ELSE 'scheduled' END AS state,
           clock.now
    FROM planned
    CROSS JOIN clock
    LEFT JOIN claimed ON claimed.run_id = planned.id
    WHERE claimed.run_id IS NOT NULL
       OR (planned.origin <> 'cron' AND planned.idempotency_key IS NULL)
), live AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           start_deadline, idempotency_key, payload, created_at,
                           updated_at, concurrency, dry_run, overlap)
    SELECT id, tenant, job, queue, priority, state, origin, max_attempts, retry_base,
           retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
           payload, now, now, concurrency, dry_run, overlap
    FROM admitted
    WHERE state <> 'skipped'
    ORDER BY ordinal
    RETURNING queue, state
), skipped AS (
    INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin,
                               max_attempts, retry_base, retry_max, timeout_seconds,
                               due_at, ready_at, start_deadline, idempotency_key, payload,
                               created_at, updated_at, finished_at, concurrency)
    SELECT id, tenant, job, queue, priority, state, origin, max_attempts, retry_base,
           retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
           payload, now, now, now, concurrency
    FROM admitted
    WHERE state = 'skipped'
    ORDER BY ordinal
    RETURNING queue, state
), marked AS (
    -- Status: these jobs' runs changed (their last run, their next run time). The
    -- materialiser's advance_definitions marks them too; a backfill has nothing else.
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM admitted
    ON CONFLICT DO NOTHING
)
SELECT queue, state FROM live
UNION ALL
SELECT queue, state FROM skipped

-- name: advance_definitions
-- $4: fire times a run_all catch-up dropped over its cap (NULL: keep the last report);
-- $5: missed fire times caught up now (counted, for the operator's MissedRunsCaughtUp).
-- Every job advanced is marked changed: its runs and its next run time moved (status).
WITH advanced AS (
    UPDATE definitions AS d
    SET next_due_at = a.next_due_at,
        missed_dropped = coalesce(a.dropped, d.missed_dropped),
        missed_caught_up = d.missed_caught_up + a.caught_up
    FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::integer[], $5::integer[])
         AS a(tenant, name, next_due_at, dropped, caught_up)
    WHERE d.tenant = a.tenant AND d.name = a.name
    RETURNING d.tenant, d.name
)
INSERT INTO changed_jobs (tenant, job)
SELECT tenant, name FROM advanced
ON CONFLICT DO NOTHING
