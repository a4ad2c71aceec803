-- Runs: enqueue, read, list, cancel.

-- name: insert_run
-- A run whose ready time has come is inserted `ready`, otherwise `scheduled`. A second
-- insert with the same idempotency key inserts nothing (the caller then reads the first
-- and compares $17, the request's fingerprint, with the one stored).
-- $18: the job is in dry-run mode.
WITH clock AS (
    SELECT coalesce($15::timestamptz, now()) AS now
), inserted AS (
    INSERT INTO runs (tenant, job, queue, priority, state, origin, max_attempts,
                      retry_base, retry_max, timeout_seconds, due_at, ready_at,
                      start_deadline, idempotency_key, payload, created_at, updated_at,
                      concurrency, request_fingerprint, dry_run)
    SELECT $1, $2, $3, $4,
           CASE WHEN coalesce($11, clock.now) <= clock.now THEN 'ready' ELSE 'scheduled' END,
           $5, $6, $7, $8, $9,
           coalesce($10, clock.now), coalesce($11, clock.now), $12, $13, $14::jsonb,
           clock.now, clock.now, $16, $17, $18
    FROM clock
    ON CONFLICT (tenant, job, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM inserted
    ON CONFLICT DO NOTHING
)
SELECT * FROM inserted

-- name: run_by_key
SELECT * FROM runs WHERE tenant = $1 AND job = $2 AND idempotency_key = $3

-- name: run_by_id
SELECT * FROM runs WHERE id = $1

-- name: runs_of_job
-- Newest first; $3 is the cursor (the last id seen), $4 an optional state filter.
SELECT *
FROM runs
WHERE tenant = $1 AND job = $2
  AND ($3::bigint IS NULL OR id < $3)
  AND ($4::text IS NULL OR state = $4)
ORDER BY id DESC
LIMIT $5

-- name: attempts_of_run
-- In the order they happened: a run's tokens strictly increase, while attempt numbers
-- start again at 1 after a DLQ replay.
SELECT attempt, fencing_token, worker_id, leased_at, finished_at, outcome, error
FROM attempts
WHERE run_id = $1
ORDER BY fencing_token

-- name: lock_run
SELECT * FROM runs WHERE id = $1 FOR UPDATE

-- name: cancel_pending
-- Runs not yet leased end as cancelled.
WITH cancelled AS (
    UPDATE runs
    SET state = 'cancelled',
        finished_at = coalesce($2::timestamptz, now()),
        updated_at = coalesce($2::timestamptz, now())
    WHERE id = $1 AND state IN ('scheduled', 'ready', 'retry_wait')
    RETURNING *
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM cancelled
    ON CONFLICT DO NOTHING
)
SELECT * FROM cancelled

-- name: request_cancel
-- A leased run finishes its lease: its next heartbeat answers cancelRequested.
UPDATE runs
SET cancel_requested = true, updated_at = coalesce($2::timestamptz, now())
WHERE id = $1 AND state = 'leased'
RETURNING *

-- name: cancel_runs_of_job
-- Deleting a job: pending runs end as cancelled, leased runs are asked to stop.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
)
UPDATE runs AS r
SET state = CASE WHEN r.state = 'leased' THEN r.state ELSE 'cancelled' END,
    cancel_requested = r.state = 'leased',
    finished_at = CASE WHEN r.state = 'leased' THEN r.finished_at ELSE clock.now END,
    updated_at = clock.now
FROM clock
WHERE r.tenant = $1 AND r.job = $2
  AND r.state IN ('scheduled', 'ready', 'retry_wait', 'leased')
RETURNING r.id, r.state

-- name: job_run_counts
-- next_scheduled: the earliest materialised run still waiting for its time.
SELECT count(*) FILTER (WHERE state = 'leased') AS active,
       count(*) FILTER (WHERE state = 'dead') AS dead,
       min(due_at) FILTER (WHERE state = 'scheduled') AS next_scheduled
FROM runs
WHERE tenant = $1 AND job = $2 AND state IN ('leased', 'dead', 'scheduled')

-- name: last_finished_run
SELECT *
FROM runs
WHERE tenant = $1 AND job = $2 AND finished_at IS NOT NULL
ORDER BY finished_at DESC, id DESC
LIMIT 1

-- name: record_audit
INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
VALUES (coalesce($7::timestamptz, now()), $1, $2, $3, $4, $5, $6::jsonb)

-- name: set_dry_run
-- A job switched in or out of dry-run mode: its runs not leased yet follow (a leased
-- run keeps the mode its handler was started in).
UPDATE runs
SET dry_run = $3
WHERE tenant = $1 AND job = $2
  AND state IN ('scheduled', 'ready', 'retry_wait')
  AND dry_run <> $3
