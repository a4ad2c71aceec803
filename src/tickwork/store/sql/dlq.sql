-- The dead-letter queue: dead runs, replay and discard.

-- name: dead_runs
-- A tenant's dead runs, newest death first; ($3, $4) is the keyset cursor.
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM finished_runs
WHERE state = 'dead' AND tenant = $1
  AND ($2::text IS NULL OR job = $2)
  AND ($3::timestamptz IS NULL OR (finished_at, id) < ($3, $4::bigint))
ORDER BY finished_at DESC, id DESC
LIMIT $5

-- name: replay_dead
-- Re-enqueue with a fresh attempt budget: the run leaves the history for live_runs, in
-- the dry-run mode its job is in now.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), revived AS (
    DELETE FROM finished_runs
    WHERE id = $1 AND state = 'dead'
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM revived
    ON CONFLICT DO NOTHING
)
INSERT INTO live_runs
SELECT id, tenant, job, queue, priority, 'ready', origin, 0, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, clock.now, NULL, idempotency_key, payload,
       fencing_token, lease_owner, leased_at, lease_expires_at, deadline, false,
       last_error, created_at, clock.now, NULL, concurrency, request_fingerprint,
       coalesce((SELECT (d.spec ->> 'dryRun')::boolean
                 FROM definitions AS d
                 WHERE d.tenant = revived.tenant AND d.name = revived.job), false)
FROM revived, clock
RETURNING id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
          retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
          idempotency_key, payload, fencing_token, lease_owner, leased_at,
          lease_expires_at, deadline, cancel_requested, last_error, created_at,
          updated_at, finished_at, concurrency, request_fingerprint, dry_run

-- name: was_replayed
-- Whether a run neither dead nor discarded now was last revived from the DLQ (the audit
-- records each replay and discard in its transaction). Through the job's audit index:
-- this is the refusal path only.
SELECT coalesce((
    SELECT a.action = 'replay'
    FROM runs AS r
    JOIN audit_log AS a ON a.tenant = r.tenant AND a.job = r.job AND a.run_id = r.id
    WHERE r.id = $1 AND r.state NOT IN ('dead', 'discarded')
      AND a.action IN ('replay', 'discard')
    ORDER BY a.id DESC
    LIMIT 1), false)

-- name: discard_dead
WITH discarded AS (
    UPDATE finished_runs
    SET state = 'discarded', updated_at = coalesce($2::timestamptz, now())
    WHERE id = $1 AND state = 'dead'
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM discarded
    ON CONFLICT DO NOTHING
)
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM discarded
