-- Job definitions.

-- name: definition_for_update
SELECT tenant, name, spec, queue, priority, paused, next_due_at, missed_dropped,
       generation, created_at, updated_at, managed_by, missed_caught_up,
       overlap_skipped, consecutive_dead, paused_reason
FROM definitions WHERE tenant = $1 AND name = $2 FOR UPDATE

-- name: definition_for_share
-- Enqueue holds the definition so a concurrent delete cannot orphan the new run.
SELECT tenant, name, spec, queue, priority, paused, next_due_at, missed_dropped,
       generation, created_at, updated_at, managed_by, missed_caught_up,
       overlap_skipped, consecutive_dead, paused_reason
FROM definitions WHERE tenant = $1 AND name = $2 FOR SHARE

-- name: definition
SELECT tenant, name, spec, queue, priority, paused, next_due_at, missed_dropped,
       generation, created_at, updated_at, managed_by, missed_caught_up,
       overlap_skipped, consecutive_dead, paused_reason
FROM definitions WHERE tenant = $1 AND name = $2

-- name: upsert_definition
-- (xmax = 0) is true for a row this statement inserted, false for an update.
WITH clock AS (
    SELECT coalesce($8::timestamptz, now()) AS now
)
-- $9: where the definition is declared (NULL: the HTTP API).
INSERT INTO definitions AS d (tenant, name, spec, queue, priority, paused, next_due_at,
                              created_at, updated_at, managed_by)
SELECT $1, $2, $3::jsonb, $4, $5, $6, $7, clock.now, clock.now, $9
FROM clock
ON CONFLICT (tenant, name) DO UPDATE
SET spec = EXCLUDED.spec,
    queue = EXCLUDED.queue,
    priority = EXCLUDED.priority,
    paused = EXCLUDED.paused,
    -- A changed spec is a deliberate act on the job: it ends a pause tickwork made
    -- (a spec applied again unchanged never reaches this statement: engine.jobs.put).
    paused_reason = NULL,
    consecutive_dead = 0,
    next_due_at = EXCLUDED.next_due_at,
    generation = d.generation + 1,
    updated_at = EXCLUDED.updated_at,
    managed_by = EXCLUDED.managed_by
RETURNING tenant, name, spec, queue, priority, paused, next_due_at, missed_dropped,
          generation, created_at, updated_at, managed_by, missed_caught_up,
          overlap_skipped, consecutive_dead, paused_reason, (xmax = 0) AS inserted

-- name: delete_definition
DELETE FROM definitions WHERE tenant = $1 AND name = $2 RETURNING name

-- name: set_paused
-- next_due_at is kept: on resume the materialiser finds the fire times missed while
-- paused and applies the job's missedRunPolicy to them. `changed` is false when the
-- job already was as asked (nothing to record). A resume also ends a pause tickwork
-- made (paused_reason) and starts the count of consecutive dead runs again.
WITH before AS (
    SELECT paused, paused_reason IS NOT NULL AS auto_paused
    FROM definitions WHERE tenant = $1 AND name = $2 FOR UPDATE
)
UPDATE definitions AS d
SET paused = $3,
    spec = jsonb_set(d.spec, '{paused}', to_jsonb($3::boolean)),
    paused_reason = CASE WHEN $3 THEN d.paused_reason END,
    consecutive_dead = CASE WHEN $3 THEN d.consecutive_dead ELSE 0 END,
    generation = CASE WHEN d.paused = $3 THEN d.generation ELSE d.generation + 1 END,
    updated_at = CASE WHEN d.paused = $3 THEN d.updated_at
                      ELSE coalesce($4::timestamptz, now()) END
FROM before
WHERE d.tenant = $1 AND d.name = $2
RETURNING d.tenant, d.name, d.spec, d.queue, d.priority, d.paused, d.next_due_at,
          d.missed_dropped, d.generation, d.created_at, d.updated_at, d.managed_by,
          d.missed_caught_up, d.overlap_skipped, d.consecutive_dead, d.paused_reason,
          before.paused IS DISTINCT FROM $3 AS changed, before.auto_paused

-- name: definitions_of_tenant
-- Keyset by name; the cross-shard merge takes the first `limit` of all shards.
SELECT tenant, name, spec, queue, priority, paused, next_due_at, missed_dropped,
       generation, created_at, updated_at, managed_by, missed_caught_up,
       overlap_skipped, consecutive_dead, paused_reason
FROM definitions
WHERE tenant = $1 AND ($2::text IS NULL OR name > $2)
ORDER BY name
LIMIT $3

-- name: managed_definitions
-- The definitions a declaration keeps ($1), in some tenants ($2; NULL: all), for the
-- resync that removes those whose declaration is gone (the partial index
-- definitions_managed serves it).
SELECT tenant, name
FROM definitions
WHERE managed_by = $1 AND ($2::text[] IS NULL OR tenant = ANY($2::text[]))
ORDER BY tenant, name

-- name: job_statuses
-- The status of many jobs of one shard ($1 tenants, $2 names, pairwise) from their
-- definitions and runs; jobs without a definition are left out.
--   next_run_time: the next nominal fire time: the earliest materialised cron run still
--     waiting or the definition's next_due_at; a runAt job's instant until its run
--     exists; none when paused.
--   last: the latest run past `scheduled` (it became ready, or ended before that): the
--     latest live one by due time, or else the newest finished one (by id, on the index).
--   last_run_id, last_attempt, runs_jobs: its id and attempt, and whether the job is a
--     container job whose attempts are Jobs (jobTemplate, not dryRun): its last Job.
-- Each figure is one index probe per job (dead runs: finished_runs_dead_by_job).
SELECT j.tenant, j.name, d.generation, d.paused, d.managed_by, d.missed_dropped,
       d.missed_caught_up, d.overlap_skipped, d.paused_reason,
       CASE WHEN d.paused THEN NULL
            WHEN d.spec ? 'schedule' THEN least(d.next_due_at, waiting.due_at)
            ELSE d.next_due_at END AS next_run_time,
       last.due_at AS last_schedule_time,
       last.state AS last_run_state,
       last.id AS last_run_id,
       last.attempt AS last_attempt,
       d.spec ? 'jobTemplate' AND d.spec -> 'dryRun' IS DISTINCT FROM 'true'::jsonb AS runs_jobs,
       (SELECT f.finished_at FROM finished_runs AS f
        WHERE f.tenant = j.tenant AND f.job = j.name AND f.state = 'succeeded'
        ORDER BY f.id DESC LIMIT 1) AS last_successful_time,
       (SELECT count(*) FROM live_runs AS r
        WHERE r.tenant = j.tenant AND r.job = j.name AND r.state = 'leased') AS active_runs,
       (SELECT count(*) FROM finished_runs AS f
        WHERE f.tenant = j.tenant AND f.job = j.name AND f.state = 'dead') AS dead_runs
FROM unnest($1::text[], $2::text[]) AS j(tenant, name)
JOIN definitions AS d ON d.tenant = j.tenant AND d.name = j.name
LEFT JOIN LATERAL (
    SELECT min(r.due_at) AS due_at FROM live_runs AS r
    WHERE r.tenant = j.tenant AND r.job = j.name AND r.state = 'scheduled'
      AND r.origin = 'cron'
) AS waiting ON true
LEFT JOIN LATERAL (
    SELECT c.due_at, c.state, c.id, c.attempt
    -- The live runs in the two parts their indexes hold (live_runs_by_job leaves the
    -- leased ones to live_runs_leased).
    FROM ((SELECT r.due_at, r.state, r.id, r.attempt FROM live_runs AS r
           WHERE r.tenant = j.tenant AND r.job = j.name
             AND r.state <> 'scheduled' AND r.state <> 'leased'
           ORDER BY r.due_at DESC, r.id DESC
           LIMIT 1)
          UNION ALL
          (SELECT r.due_at, r.state, r.id, r.attempt FROM live_runs AS r
           WHERE r.tenant = j.tenant AND r.job = j.name AND r.state = 'leased'
           ORDER BY r.due_at DESC, r.id DESC
           LIMIT 1)
          UNION ALL
          (SELECT f.due_at, f.state, f.id, f.attempt FROM finished_runs AS f
           WHERE f.tenant = j.tenant AND f.job = j.name
           ORDER BY f.id DESC
           LIMIT 1)) AS c
    ORDER BY c.due_at DESC, c.id DESC
    LIMIT 1
) AS last ON true
