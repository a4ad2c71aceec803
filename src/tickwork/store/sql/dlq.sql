-- The dead-letter queue: dead runs, replay and discard.

-- name: dead_runs
-- A tenant's dead runs, newest death first; ($3, $4) is the keyset cursor.
SELECT *
FROM runs
WHERE state = 'dead' AND tenant = $1
  AND ($2::text IS NULL OR job = $2)
  AND ($3::timestamptz IS NULL OR (finished_at, id) < ($3, $4::bigint))
ORDER BY finished_at DESC, id DESC
LIMIT $5

-- name: replay_dead
-- Re-enqueue with a fresh attempt budget, in the dry-run mode the job is in now.
WITH replayed AS (
    UPDATE runs AS r
    SET state = 'ready',
        attempt = 0,
        ready_at = coalesce($2::timestamptz, now()),
        start_deadline = NULL,
        finished_at = NULL,
        cancel_requested = false,
        dry_run = coalesce((SELECT (d.spec ->> 'dryRun')::boolean
                            FROM definitions AS d
                            WHERE d.tenant = r.tenant AND d.name = r.job), false),
        updated_at = coalesce($2::timestamptz, now())
    WHERE r.id = $1 AND r.state = 'dead'
    RETURNING r.*
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM replayed
    ON CONFLICT DO NOTHING
)
SELECT * FROM replayed

-- name: discard_dead
WITH discarded AS (
    UPDATE runs
    SET state = 'discarded', updated_at = coalesce($2::timestamptz, now())
    WHERE id = $1 AND state = 'dead'
    RETURNING *
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM discarded
    ON CONFLICT DO NOTHING
)
SELECT * FROM discarded
